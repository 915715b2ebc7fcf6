//! Replay stamps (the profiler ranges cgfast's patched `CUDAGraph.replay` opens) and
//! graph launches: what recovery matches replays to graphs by.

use crate::index::keys::KeyId;

/// The name prefix of the profiler range cgfast's patched `CUDAGraph.replay` opens:
/// `cgfast.replay <executable graph id>`.
pub(crate) const STAMP_PREFIX: &str = "cgfast.replay";

/// A replay stamp: the graph its range names, and where and when the range ran.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Stamp {
    pub(crate) pid: KeyId,
    pub(crate) tid: KeyId,
    pub(crate) start: f64,
    pub(crate) end: f64,
    pub(crate) graph: u32,
}

/// A `cudaGraphLaunch` call: its correlation, thread and start.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Launch {
    pub(crate) correlation: i64,
    pub(crate) pid: KeyId,
    pub(crate) tid: KeyId,
    pub(crate) ts: f64,
}

/// The graph a stamp's name gives, if it is well formed (`cgfast.replay 12`).
pub(crate) fn stamp_graph(name: &str) -> Option<u32> {
    let digits = name.strip_prefix(STAMP_PREFIX)?.strip_prefix(' ')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Whether a runtime call launches a graph.
pub(crate) fn is_graph_launch(name: &str) -> bool {
    matches!(
        name,
        "cudaGraphLaunch"
            | "cudaGraphLaunch_v10000"
            | "cuGraphLaunch"
            | "cuGraphLaunch_ptsz"
            | "cudaGraphLaunch_ptsz"
    )
}
