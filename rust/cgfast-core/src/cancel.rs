//! A process-wide request to stop a run (Ctrl-C, SIGTERM), set from a signal handler
//! or another thread and polled between chunks of input and output, so that a run
//! fails like any other: its temporary output removed, no existing file touched.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

static REQUESTED: AtomicBool = AtomicBool::new(false);

/// Ask every run in this process to stop (async-signal-safe: one atomic store).
pub fn request() {
    REQUESTED.store(true, Ordering::SeqCst);
}

pub fn requested() -> bool {
    REQUESTED.load(Ordering::SeqCst)
}

/// Forget an earlier request, before a new run in the same process.
pub fn clear() {
    REQUESTED.store(false, Ordering::SeqCst);
}

/// An error once a stop was requested.
pub fn check() -> io::Result<()> {
    if requested() {
        Err(io::Error::new(io::ErrorKind::Interrupted, "interrupted"))
    } else {
        Ok(())
    }
}
