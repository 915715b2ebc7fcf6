//! The compact index of a trace: only the events a pass may change or whose lane
//! matters ([`tracked`]), the flow arrows ([`flow`]), replay stamps and launches
//! ([`stamps`]), in the vocabulary of [`event`], plus which lanes everything else uses.
//! Reading builds it (`crate::read::ingest`); the passes decide on it.

pub(crate) mod event;
pub(crate) mod flow;
pub(crate) mod keys;
pub(crate) mod stamps;
pub(crate) mod tracked;

pub use event::NodeId;
pub(crate) use event::{pack, unpack};
pub(crate) use event::{Cat, Field, Node, Ph, ReplayMarker, NONE};
pub(crate) use flow::Flow;
pub(crate) use stamps::{is_graph_launch, stamp_graph, Launch, Stamp, STAMP_PREFIX};
pub(crate) use tracked::Tracked;

use crate::index::keys::{Key, KeyId, Keys, Strings};

/// The index built in one pass over a trace.
#[derive(Default, Debug)]
pub(crate) struct TraceIndex {
    pub(crate) events: Vec<Tracked>,
    pub(crate) flows: Vec<Flow>,
    /// By key id: whether an untracked, non-metadata event sits on that lane.
    pub(crate) untracked_lanes: Vec<bool>,
    /// Correlation ids of `cudaGraphLaunch` calls.
    pub(crate) graph_launches: rustc_hash::FxHashSet<i64>,
    /// Every graph launch with a thread and a start, for matching to stamps.
    pub(crate) launches: Vec<Launch>,
    /// Replay stamps, in trace order.
    pub(crate) stamps: Vec<Stamp>,
    /// Ranges named `cgfast.replay...` that name no graph, or have no start or duration.
    pub(crate) malformed_stamps: u64,
    /// Some event's `args` has a `"graph id"`: the trace splits its node ids as torch
    /// 2.15's Cuspy profiler does, and recovered ones are written back split too.
    pub(crate) split_ids: bool,
    /// Some event is a scope span an earlier run of cgfast wrote.
    pub(crate) scope_spans: bool,
    pub(crate) keys: Keys,
    pub(crate) names: Strings,
    pub(crate) shapes: Vec<[u32; 6]>,
    pub(crate) shape_ids: rustc_hash::FxHashMap<[u32; 6], u32>,
    pub(crate) event_count: u64,
    /// The dict API's events and flows whose `ts` is not a number (or is absent), by the
    /// key Python would index them under (`None` for an absent one); the scanner sets
    /// none, so `append` has none to carry.
    odd_ts_keys: rustc_hash::FxHashMap<Kept, Key>,
}

/// What ingesting an event kept of it (see `crate::read::ingest`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Kept {
    Event(usize),
    Flow(usize),
    Lane,
}

impl TraceIndex {
    /// Note that an untracked event sits on `tid`.
    pub(crate) fn use_lane(&mut self, tid: KeyId) {
        let i = tid as usize;
        if self.untracked_lanes.len() <= i {
            self.untracked_lanes.resize(i + 1, false);
        }
        self.untracked_lanes[i] = true;
    }

    /// Record the key of a non-numeric `ts` (the dict API's flow index uses it).
    pub(crate) fn set_odd_ts_key(&mut self, kept: Kept, key: Key) {
        self.odd_ts_keys.insert(kept, key);
    }

    /// `ts` as a key of the reference's flow index: `None` when it has none.
    pub(crate) fn ts_key(&self, kept: Kept) -> Option<Key> {
        let ts = match kept {
            Kept::Event(i) => self.events[i].ts(),
            Kept::Flow(i) => self.flows[i].ts(),
            Kept::Lane => None,
        };
        ts.and_then(Key::from_num).or_else(|| self.odd_ts_keys.get(&kept).copied())
    }

    pub(crate) fn lane_used_by_untracked(&self, tid: KeyId) -> bool {
        self.untracked_lanes.get(tid as usize).copied().unwrap_or(false)
    }

    /// The id of a grid and block shape, added if new.
    pub(crate) fn shape_id(&mut self, gb: [u32; 6]) -> u32 {
        let next = self.shapes.len() as u32;
        let id = *self.shape_ids.entry(gb).or_insert(next);
        if id == next {
            self.shapes.push(gb);
        }
        id
    }

    pub(crate) fn name_of(&self, event: &Tracked) -> &str {
        if event.name == NONE {
            "?"
        } else {
            self.names.get(event.name)
        }
    }

    pub(crate) fn shape_of(&self, event: &Tracked) -> Option<[u32; 6]> {
        (event.shape != NONE).then(|| self.shapes[event.shape as usize])
    }
}
#[cfg(test)]
mod size_tests {
    use std::mem::size_of;

    /// Memory grows by these with every tracked event and flow.
    #[test]
    fn index_entries_stay_small() {
        assert!(size_of::<super::Tracked>() <= 80);
        assert!(size_of::<super::Flow>() <= 32);
        assert!(size_of::<crate::read::layout::ByteSpan>() <= 16);
        assert!(size_of::<crate::read::layout::Places>() <= 20);
    }

    #[test]
    fn split_node_ids_are_joined() {
        use super::Node;
        assert_eq!(Node::Id(3).joined(Some(6)), Node::Id(6 << 32 | 3));
        assert_eq!(Node::Zero.joined(Some(6)), Node::Id(6 << 32), "a graph's first node");
        assert_eq!(Node::Id(6 << 32 | 3).joined(Some(6)), Node::Id(6 << 32 | 3), "already whole");
        assert_eq!(Node::Id(3).joined(None), Node::Id(3));
        assert_eq!(Node::Zero.joined(Some(0)), Node::Zero, "eager: no graph");
        assert_eq!(Node::Missing.joined(Some(6)), Node::Missing);
        assert_eq!(Node::Id(-1).joined(Some(6)), Node::Id(-1));
    }
}
