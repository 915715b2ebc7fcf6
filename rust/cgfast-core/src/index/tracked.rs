//! Tracked events: those a pass may change, move, remove or name a lane after, each in
//! a few words (its flags in one), so that the index of a large trace stays small.

use crate::index::event::{pack, unpack, Cat, Field, Node, NodeId, Ph, ReplayMarker, NONE};
use crate::index::keys::{KeyId, Keys, Num, Spelling};
use crate::read::ingest::Observed;

const ODD: u32 = 1;
const THREAD_NAME: u32 = 1 << 1;
const STREAM_THREAD_NAME: u32 = 1 << 2;
const REMOVED: u32 = 1 << 3;
const ANNOTATED: u32 = 1 << 4;
const TS_SET: u32 = 1 << 5;
const TS_INT: u32 = 1 << 6;
const DUR_INT: u32 = 1 << 7;
const NEW_TS_SET: u32 = 1 << 8;
const NEW_TS_INT: u32 = 1 << 9;
const LANE_SET: u32 = 1 << 10;
const RECOVERED: u32 = 1 << 11;
const HAS_CORRELATION: u32 = 1 << 12;
const NODE_NEGATIVE: u32 = 1 << 13;
const TID_FLOAT: u32 = 1 << 14;
const TID_BOOL: u32 = 1 << 15;
const PID_FLOAT: u32 = 1 << 16;
const PID_BOOL: u32 = 1 << 17;
/// `ts` present but not a number.
const TS_NOT_NUMBER: u32 = 1 << 18;
/// `dur` present but not a number.
const DUR_NOT_NUMBER: u32 = 1 << 19;
/// A scope span cgfast wrote.
const SCOPE_SPAN: u32 = 1 << 20;
/// The replay marker the event had (two bits) and the one it gets (two bits).
const MARKER_IN_SHIFT: u32 = 21;
const MARKER_OUT_SHIFT: u32 = 23;
const MARKER_MASK: u32 = 0b11;
/// An earlier run moved it (its args hold `original_stream`).
const MOVED_EARLIER: u32 = 1 << 25;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum NodeIdKind {
    Missing,
    Null,
    Zero,
    Id,
    Other,
}

fn marker_from_bits(bits: u32) -> ReplayMarker {
    match bits & MARKER_MASK {
        1 => ReplayMarker::Ambiguous,
        2 => ReplayMarker::Unmatched,
        _ => ReplayMarker::None,
    }
}

/// An event a pass may change, move, remove or name a lane after.
#[derive(Clone, Debug)]
pub(crate) struct Tracked {
    /// Position in `traceEvents`.
    pub(crate) ordinal: u32,
    pub(crate) cat: Cat,
    pub(crate) ph: Ph,
    flags: u32,
    node_kind: NodeIdKind,
    /// `NONE` when the event has no `pid`.
    pub(crate) pid: KeyId,
    pub(crate) tid: KeyId,
    /// `args["stream"]` as it was (`NONE` when absent).
    pub(crate) args_stream: KeyId,
    pub(crate) name: u32,
    /// Grid and block dimensions, by id in `TraceIndex::shapes`.
    pub(crate) shape: u32,
    pub(crate) new_tid: KeyId,
    /// The magnitude of the node id (its sign is a flag).
    node: u64,
    ts: u64,
    dur: u64,
    new_ts: u64,
    correlation: i64,
}

impl Tracked {
    fn has(&self, flag: u32) -> bool {
        self.flags & flag != 0
    }

    pub(crate) fn odd(&self) -> bool {
        self.has(ODD)
    }

    pub(crate) fn removed(&self) -> bool {
        self.has(REMOVED)
    }

    pub(crate) fn remove(&mut self) {
        self.flags |= REMOVED;
    }

    pub(crate) fn thread_name(&self) -> bool {
        self.has(THREAD_NAME)
    }

    pub(crate) fn stream_thread_name(&self) -> bool {
        self.has(STREAM_THREAD_NAME)
    }

    /// A scope span an earlier run of cgfast wrote.
    pub(crate) fn scope_span(&self) -> bool {
        self.has(SCOPE_SPAN)
    }

    /// An earlier run moved it: its args hold `original_stream`.
    pub(crate) fn moved_earlier(&self) -> bool {
        self.has(MOVED_EARLIER)
    }

    /// The replay marker the event had in the input.
    pub(crate) fn replay_marker_in(&self) -> ReplayMarker {
        marker_from_bits(self.flags >> MARKER_IN_SHIFT)
    }

    /// The replay marker the event gets (the input's unless recovery decided).
    pub(crate) fn replay_marker(&self) -> ReplayMarker {
        marker_from_bits(self.flags >> MARKER_OUT_SHIFT)
    }

    pub(crate) fn set_replay_marker(&mut self, marker: ReplayMarker) {
        self.flags = (self.flags & !(MARKER_MASK << MARKER_OUT_SHIFT)) | (marker as u32) << MARKER_OUT_SHIFT;
    }

    /// The marker to write where it changed: `Some(None)` drops the input's.
    pub(crate) fn replay_marker_change(&self) -> Option<ReplayMarker> {
        (self.replay_marker() != self.replay_marker_in()).then(|| self.replay_marker())
    }

    /// How the event's own `tid` was written.
    pub(crate) fn tid_spelling(&self) -> Spelling {
        match (self.has(TID_FLOAT), self.has(TID_BOOL)) {
            (true, _) => Spelling::Float,
            (_, true) => Spelling::Bool,
            _ => Spelling::Plain,
        }
    }

    /// How the tid it has now is written (a pass writes an int).
    pub(crate) fn current_tid_spelling(&self) -> Spelling {
        if self.has(LANE_SET) {
            Spelling::Plain
        } else {
            self.tid_spelling()
        }
    }

    pub(crate) fn pid_spelling(&self) -> Spelling {
        match (self.has(PID_FLOAT), self.has(PID_BOOL)) {
            (true, _) => Spelling::Float,
            (_, true) => Spelling::Bool,
            _ => Spelling::Plain,
        }
    }

    pub(crate) fn correlation(&self) -> Option<i64> {
        self.has(HAS_CORRELATION).then_some(self.correlation)
    }

    /// `args["graph node id"]` as the trace has it.
    pub(crate) fn node(&self) -> Node {
        if self.has(RECOVERED) {
            return Node::Missing;
        }
        self.current_node()
    }

    pub(crate) fn current_node(&self) -> Node {
        match self.node_kind {
            NodeIdKind::Missing => Node::Missing,
            NodeIdKind::Null => Node::Null,
            NodeIdKind::Zero => Node::Zero,
            NodeIdKind::Id => Node::Id(self.node_id()),
            NodeIdKind::Other => Node::Other,
        }
    }

    /// What the reference's `event["ts"]` would find.
    pub(crate) fn ts_field(&self) -> Field<Num> {
        match self.ts() {
            Some(ts) => Field::Value(ts),
            None if self.has(TS_NOT_NUMBER) => Field::Odd,
            None => Field::Missing,
        }
    }

    /// Whether `dur` is there but not a number.
    pub(crate) fn dur_is_odd(&self) -> bool {
        self.has(DUR_NOT_NUMBER)
    }

    pub(crate) fn ts(&self) -> Option<Num> {
        self.has(TS_SET).then(|| unpack(self.ts, self.has(TS_INT)))
    }

    pub(crate) fn dur(&self) -> Num {
        unpack(self.dur, self.has(DUR_INT))
    }

    pub(crate) fn current_tid(&self) -> KeyId {
        if self.has(LANE_SET) {
            self.new_tid
        } else {
            self.tid
        }
    }

    /// The new lane, if a pass moved the event.
    pub(crate) fn moved_to(&self) -> Option<KeyId> {
        (self.has(LANE_SET) && self.new_tid != self.tid).then_some(self.new_tid)
    }

    /// The repaired timestamp, if a pass changed it.
    pub(crate) fn new_ts(&self) -> Option<Num> {
        self.has(NEW_TS_SET).then(|| unpack(self.new_ts, self.has(NEW_TS_INT)))
    }

    pub(crate) fn current_ts(&self) -> Option<Num> {
        self.new_ts().or_else(|| self.ts())
    }

    fn node_id(&self) -> NodeId {
        if self.has(NODE_NEGATIVE) {
            -(self.node as NodeId)
        } else {
            self.node as NodeId
        }
    }

    fn set_node(&mut self, node: NodeId) {
        self.node_kind = NodeIdKind::Id;
        self.node = node.unsigned_abs() as u64;
        if node < 0 {
            self.flags |= NODE_NEGATIVE;
        } else {
            self.flags &= !NODE_NEGATIVE;
        }
    }

    pub(crate) fn recovered_node(&self) -> Option<NodeId> {
        self.has(RECOVERED).then(|| self.node_id())
    }

    pub(crate) fn set_recovered(&mut self, node: NodeId) {
        self.flags |= RECOVERED;
        self.set_replay_marker(ReplayMarker::None);
        self.set_node(node);
    }

    /// The node whose annotation the event carries.
    pub(crate) fn annotation(&self) -> Option<NodeId> {
        (self.has(ANNOTATED) && self.node_kind == NodeIdKind::Id).then(|| self.node_id())
    }

    pub(crate) fn set_annotated(&mut self) {
        self.flags |= ANNOTATED;
    }

    /// Put the event on lane `lane` (the key of the integer stream id the caller knows),
    /// with `args["stream"]` saying so.
    pub(crate) fn set_lane(&mut self, lane: KeyId) {
        self.flags |= LANE_SET;
        self.new_tid = lane;
    }

    /// The lane a pass put the event on (its `args["stream"]` says the same).
    pub(crate) fn new_lane(&self) -> Option<KeyId> {
        self.has(LANE_SET).then_some(self.new_tid)
    }

    /// The `args["stream"]` a pass decided on.
    pub(crate) fn new_stream(&self, keys: &Keys) -> Option<i64> {
        if self.has(LANE_SET) {
            keys.key(self.new_tid).as_int()
        } else {
            None
        }
    }

    pub(crate) fn set_ts(&mut self, ts: Num) {
        let (value, int) = pack(ts);
        self.new_ts = value;
        self.flags |= NEW_TS_SET;
        if int {
            self.flags |= NEW_TS_INT;
        } else {
            self.flags &= !NEW_TS_INT;
        }
    }

    /// Whether the passes changed anything that the JSON would show.
    pub(crate) fn changed(&self) -> bool {
        self.removed()
            || self.annotation().is_some()
            || self.has(RECOVERED)
            || self.replay_marker_change().is_some()
            || self.moved_to().is_some()
            || self.has(NEW_TS_SET)
            || (self.has(LANE_SET) && self.args_stream != self.new_tid)
    }
}

/// The ids a tracked event's fields have in the index's tables.
pub(crate) struct Ids {
    pub(crate) pid: KeyId,
    pub(crate) tid: KeyId,
    pub(crate) args_stream: KeyId,
    pub(crate) name: u32,
    pub(crate) shape: u32,
}

impl Tracked {
    /// The event at `ordinal` in `traceEvents`, as `ev` says, with its fields' `ids`.
    pub(crate) fn observed(ordinal: u32, ev: &Observed<'_>, ids: Ids) -> Tracked {
        let ts = ev.ts.value().map(pack);
        let dur = match ev.dur {
            Field::Missing => Some(pack(Num::ZERO)),
            Field::Value(d) => Some(pack(d)),
            Field::Odd => None,
        };
        let mut flags = 0;
        if ev.args == Field::Odd || ts.is_none() || dur.is_none() {
            flags |= ODD;
        }
        if ev.ts == Field::Odd {
            flags |= TS_NOT_NUMBER;
        }
        if ev.dur == Field::Odd {
            flags |= DUR_NOT_NUMBER;
        }
        if let Some((_, int)) = ts {
            flags |= TS_SET | if int { TS_INT } else { 0 };
        }
        if dur.is_some_and(|(_, int)| int) {
            flags |= DUR_INT;
        }
        if ev.ph == Ph::Meta && ev.name == Some("thread_name") {
            flags |= THREAD_NAME;
            if ev.args_name_is_stream {
                flags |= STREAM_THREAD_NAME;
            }
        }
        if ev.correlation.is_some() {
            flags |= HAS_CORRELATION;
        }
        if ev.scope_span && ev.cat == Cat::UserAnnotation {
            flags |= SCOPE_SPAN;
        }
        if ev.moved_earlier {
            flags |= MOVED_EARLIER;
        }
        if ev.cat.is_work() {
            let marker = ev.replay_marker as u32;
            flags |= marker << MARKER_IN_SHIFT | marker << MARKER_OUT_SHIFT;
        }
        flags |= match ev.tid_spelling {
            Spelling::Plain => 0,
            Spelling::Float => TID_FLOAT,
            Spelling::Bool => TID_BOOL,
        } | match ev.pid_spelling {
            Spelling::Plain => 0,
            Spelling::Float => PID_FLOAT,
            Spelling::Bool => PID_BOOL,
        };
        let (node_kind, node) = match ev.node {
            Node::Missing => (NodeIdKind::Missing, 0),
            Node::Null => (NodeIdKind::Null, 0),
            Node::Zero => (NodeIdKind::Zero, 0),
            Node::Id(i) if i.unsigned_abs() <= u64::MAX as u128 => {
                if i < 0 {
                    flags |= NODE_NEGATIVE;
                }
                (NodeIdKind::Id, i.unsigned_abs() as u64)
            }
            Node::Id(_) | Node::Other => (NodeIdKind::Other, 0),
        };
        Tracked {
            ordinal,
            cat: ev.cat,
            ph: ev.ph,
            flags,
            node_kind,
            pid: ids.pid,
            tid: ids.tid,
            args_stream: ids.args_stream,
            name: ids.name,
            shape: ids.shape,
            new_tid: NONE,
            node,
            ts: ts.map_or(0, |t| t.0),
            dur: dur.map_or(0, |d| d.0),
            new_ts: 0,
            correlation: ev.correlation.unwrap_or(0),
        }
    }
}
