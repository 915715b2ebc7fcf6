//! [`CancelToken`]: a run's own request to stop.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A request to stop the runs given this token (a clone shares it): set from another
/// thread or a signal handler, polled by a run between chunks of input and output, so
/// that a cancelled run fails like any other, with [`Error::Cancelled`](crate::Error),
/// its temporary output removed and no existing file touched. A token, once cancelled,
/// stays so: each run takes a fresh one, and no run can cancel or un-cancel another's.
#[derive(Clone, Debug, Default)]
pub struct CancelToken(Arc<AtomicBool>);

impl CancelToken {
    /// A token not cancelled.
    pub fn new() -> CancelToken {
        CancelToken::default()
    }

    /// Ask the runs holding this token to stop (async-signal-safe: one atomic store).
    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// Whether [`CancelToken::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    /// An error once cancelled, for the loops that read and write a run's files.
    pub(crate) fn check(&self) -> io::Result<()> {
        if self.is_cancelled() {
            Err(io::Error::new(io::ErrorKind::Interrupted, "interrupted"))
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_a_request_and_other_tokens_do_not() {
        let run = CancelToken::new();
        let other = CancelToken::new();
        let clone = run.clone();
        assert!(!run.is_cancelled() && run.check().is_ok());
        clone.cancel();
        assert!(run.is_cancelled() && run.check().is_err());
        assert!(!other.is_cancelled());
    }
}
