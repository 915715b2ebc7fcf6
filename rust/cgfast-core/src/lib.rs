//! cgfast's core: everything the CLI and the Python bindings share, free of Python.
//!
//! A run of [`pipeline::annotate_file`] takes a trace through three stages, one folder each:
//!
//! 1. [`read`]: one streaming pass over the trace (plain or gzipped) checks its JSON and
//!    builds a [`TraceIndex`] of the events a pass may change ([`index`]).
//! 2. [`passes`]: decisions on the index, with the node annotations of [`annotations`]
//!    (read by [`annotations::file`]): which lane each graphed event goes to, which events
//!    are replicated noise, which overlapping kernels move aside, which timestamps are jitter
//!    ([`passes::lanes`]), node ids for traces whose profiler wrote none ([`passes::recover`])
//!    and the scope spans that group a replay's kernels by module ([`passes::spans`]).
//! 3. [`write`]: a second streaming pass copies every untouched byte and splices in the
//!    changed events ([`write::rewrite`]) into an output committed atomically.
//!
//! [`summary`] reads a trace once more for where the GPU time of replays goes; [`files`]
//! says which files a command line names; [`json`] is the scanner all readers share.
//! [`cancel`] stops a run between chunks.

pub mod annotations;
pub mod cancel;
pub mod files;
pub mod index;
pub(crate) mod json;
pub mod passes;
pub mod pipeline;
pub(crate) mod read;
pub mod summary;
pub(crate) mod write;

pub use annotations::Annotations;
pub use index::{NodeId, TraceIndex};
pub use json::value as json_value;
pub use pipeline::{annotate_file, Options, Report};

/// The scanner's entry points, for `examples/scan_floor.rs` (how fast validating a trace
/// is against indexing it); not an API.
#[doc(hidden)]
pub mod scan_floor {
    pub use crate::json::Cursor;
    pub use crate::read::scan::{scan, WriteKeys};
}

/// How many threads to use: `CGFAST_THREADS`, else one per core.
pub fn threads() -> usize {
    std::env::var("CGFAST_THREADS")
        .ok()
        .and_then(|t| t.parse::<usize>().ok())
        .filter(|&t| t > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}
