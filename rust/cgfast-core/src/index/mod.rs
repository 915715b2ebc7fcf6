//! The compact index of a trace: only the events a pass may change or whose lane
//! matters, in the fields the passes read, plus which lanes everything else uses.

pub mod keys;

use crate::index::keys::{Key, KeyId, Keys, Num, Spelling, Strings};

/// No id: a missing key, name, shape or link.
pub const NONE: u32 = u32::MAX;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Cat {
    Kernel,
    Memcpy,
    Memset,
    UserAnnotation,
    /// A CPU-side `record_function` range (`user_annotation`): only replay stamps are kept.
    CpuAnnotation,
    Ac2g,
    Runtime,
    Other,
}

impl Cat {
    pub fn from_name(cat: &str) -> Cat {
        Cat::from_bytes(cat.as_bytes())
    }

    pub fn from_bytes(cat: &[u8]) -> Cat {
        match cat {
            b"kernel" => Cat::Kernel,
            b"gpu_memcpy" => Cat::Memcpy,
            b"gpu_memset" => Cat::Memset,
            b"gpu_user_annotation" => Cat::UserAnnotation,
            b"user_annotation" => Cat::CpuAnnotation,
            b"ac2g" => Cat::Ac2g,
            b"cuda_runtime" | b"cuda_driver" => Cat::Runtime,
            _ => Cat::Other,
        }
    }

    pub fn is_work(self) -> bool {
        matches!(self, Cat::Kernel | Cat::Memcpy | Cat::Memset)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Ph {
    Meta,
    FlowFinish,
    Other,
}

impl Ph {
    pub fn from_name(ph: &str) -> Ph {
        match ph {
            "M" => Ph::Meta,
            "f" => Ph::FlowFinish,
            _ => Ph::Other,
        }
    }
}

/// A field of an event: absent, a value of the expected type, or something else.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Field<T> {
    Missing,
    Value(T),
    Odd,
}

impl<T: Copy> Field<T> {
    pub fn value(self) -> Option<T> {
        match self {
            Field::Value(v) => Some(v),
            _ => None,
        }
    }
}

/// A graph node id: `graph_id << 32 | local_id`, unsigned 64 bits in practice; wider so
/// that any integer a trace or an annotation file holds compares as Python compares it.
pub type NodeId = i128;

/// `args["graph node id"]` as the reference reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Node {
    Missing,
    Null,
    Zero,
    Id(NodeId),
    /// Present, not zero, and not an integer (a string, a fraction, ...).
    Other,
}

impl Node {
    /// A `graph node id` that is a number within 64 bits (an integer beyond them is
    /// `Node::Id` of its exact value, read by the caller, as Python compares it).
    pub fn of_num(n: Num) -> Node {
        if n.as_f64() == 0.0 {
            return Node::Zero;
        }
        match Key::from_num(n) {
            Some(Key::Int(i)) => Node::Id(i as NodeId),
            _ => Node::Other,
        }
    }

    /// `graph node id` not None and not 0: what `annotate_trace` processes.
    pub fn annotatable(self) -> bool {
        matches!(self, Node::Id(_) | Node::Other)
    }

    /// `args.get("graph node id", 0) != 0`: what the lane passes process.
    pub fn graphed(self) -> bool {
        !matches!(self, Node::Missing | Node::Zero)
    }

    /// The node of a split pair, as torch 2.15's Cuspy profiler writes them: `"graph id"`
    /// G beside a local `"graph node id"` below 2^32 (0 for a graph's first node) stand
    /// for `G << 32 | local`. Anything else stays as it is.
    pub fn joined(self, graph_id: Option<i64>) -> Node {
        match (self, graph_id) {
            (Node::Zero, Some(g)) if g > 0 => Node::Id((g as NodeId) << 32),
            (Node::Id(local), Some(g)) if g > 0 && (0..1 << 32).contains(&local) => {
                Node::Id((g as NodeId) << 32 | local)
            }
            (node, _) => node,
        }
    }
}

/// Whether the event needs more than its lane recorded: the scanner decodes the
/// other fields only for these.
pub fn is_tracked(cat: Cat, ph: Ph, node: Node) -> bool {
    node != Node::Missing
        || cat.is_work()
        || cat == Cat::UserAnnotation
        || cat == Cat::Runtime
        || cat == Cat::Ac2g
        || ph == Ph::Meta
}

/// What an event says about itself, decoded from JSON or from a Python dict.
#[derive(Clone, Debug)]
pub struct Observed<'a> {
    pub ph: Ph,
    pub cat: Cat,
    pub name: Option<&'a str>,
    pub pid: Option<Key>,
    pub tid: Key,
    /// How `pid` and `tid` were written, where an integer key hides it (`7.0`, `true`).
    pub pid_spelling: Spelling,
    pub tid_spelling: Spelling,
    pub ts: Field<Num>,
    pub dur: Field<Num>,
    pub args: Field<()>,
    pub node: Node,
    pub args_stream: Option<Key>,
    /// `str(args["name"])` starts with `"stream "`.
    pub args_name_is_stream: bool,
    /// A scope span cgfast wrote (`args["cgfast"] == "scope"` on a `gpu_user_annotation`).
    pub scope_span: bool,
    /// The replay marker an earlier run wrote in `args["cgfast"]`.
    pub replay_marker: ReplayMarker,
    /// Its args hold `original_stream`: an earlier run moved it.
    pub moved_earlier: bool,
    pub correlation: Option<i64>,
    pub grid_block: Option<[u32; 6]>,
}

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

/// Why recovery left a graph-launched event without a node id, as annotate writes it in
/// `args["cgfast"]`, so that `cgfast summary` can tell the two apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ReplayMarker {
    None = 0,
    /// Several recorded graphs fit its replay with differing annotations.
    Ambiguous = 1,
    /// No recorded graph fits its replay.
    Unmatched = 2,
}

impl ReplayMarker {
    pub const AMBIGUOUS: &'static str = "ambiguous replay";
    pub const UNMATCHED: &'static str = "unmatched replay";

    pub fn from_text(text: &str) -> ReplayMarker {
        match text {
            Self::AMBIGUOUS => ReplayMarker::Ambiguous,
            Self::UNMATCHED => ReplayMarker::Unmatched,
            _ => ReplayMarker::None,
        }
    }

    /// The JSON value written for it.
    pub fn json(self) -> Option<&'static str> {
        match self {
            ReplayMarker::None => None,
            ReplayMarker::Ambiguous => Some("\"ambiguous replay\""),
            ReplayMarker::Unmatched => Some("\"unmatched replay\""),
        }
    }

    fn from_bits(bits: u32) -> ReplayMarker {
        match bits & MARKER_MASK {
            1 => ReplayMarker::Ambiguous,
            2 => ReplayMarker::Unmatched,
            _ => ReplayMarker::None,
        }
    }
}

/// A number in 64 bits: an integer's own bits or a float's, `int` telling which, so
/// that integers of any size keep exact (epoch nanoseconds exceed 2**53).
pub(crate) fn pack(n: Num) -> (u64, bool) {
    match n {
        Num::Float(f) => (f.to_bits(), false),
        Num::Int(i) => (i as u64, true),
    }
}

pub(crate) fn unpack(bits: u64, int: bool) -> Num {
    if int {
        Num::Int(bits as i64)
    } else {
        Num::Float(f64::from_bits(bits))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum NodeIdKind {
    Missing,
    Null,
    Zero,
    Id,
    Other,
}

/// An event a pass may change, move, remove or name a lane after.
#[derive(Clone, Debug)]
pub struct Tracked {
    /// Position in `traceEvents`.
    pub ordinal: u32,
    pub cat: Cat,
    pub ph: Ph,
    flags: u32,
    node_kind: NodeIdKind,
    /// `NONE` when the event has no `pid`.
    pub pid: KeyId,
    pub tid: KeyId,
    /// `args["stream"]` as it was (`NONE` when absent).
    pub args_stream: KeyId,
    pub name: u32,
    /// Grid and block dimensions, by id in `TraceIndex::shapes`.
    pub shape: u32,
    new_tid: KeyId,
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

    pub fn odd(&self) -> bool {
        self.has(ODD)
    }

    pub fn removed(&self) -> bool {
        self.has(REMOVED)
    }

    pub fn remove(&mut self) {
        self.flags |= REMOVED;
    }

    pub fn thread_name(&self) -> bool {
        self.has(THREAD_NAME)
    }

    pub fn stream_thread_name(&self) -> bool {
        self.has(STREAM_THREAD_NAME)
    }

    /// A scope span an earlier run of cgfast wrote.
    pub fn scope_span(&self) -> bool {
        self.has(SCOPE_SPAN)
    }

    /// An earlier run moved it: its args hold `original_stream`.
    pub fn moved_earlier(&self) -> bool {
        self.has(MOVED_EARLIER)
    }

    /// The replay marker the event had in the input.
    pub fn replay_marker_in(&self) -> ReplayMarker {
        ReplayMarker::from_bits(self.flags >> MARKER_IN_SHIFT)
    }

    /// The replay marker the event gets (the input's unless recovery decided).
    pub fn replay_marker(&self) -> ReplayMarker {
        ReplayMarker::from_bits(self.flags >> MARKER_OUT_SHIFT)
    }

    pub fn set_replay_marker(&mut self, marker: ReplayMarker) {
        self.flags = (self.flags & !(MARKER_MASK << MARKER_OUT_SHIFT)) | (marker as u32) << MARKER_OUT_SHIFT;
    }

    /// The marker to write where it changed: `Some(None)` drops the input's.
    pub fn replay_marker_change(&self) -> Option<ReplayMarker> {
        (self.replay_marker() != self.replay_marker_in()).then(|| self.replay_marker())
    }

    /// How the event's own `tid` was written.
    pub fn tid_spelling(&self) -> Spelling {
        match (self.has(TID_FLOAT), self.has(TID_BOOL)) {
            (true, _) => Spelling::Float,
            (_, true) => Spelling::Bool,
            _ => Spelling::Plain,
        }
    }

    /// How the tid it has now is written (a pass writes an int).
    pub fn current_tid_spelling(&self) -> Spelling {
        if self.has(LANE_SET) {
            Spelling::Plain
        } else {
            self.tid_spelling()
        }
    }

    pub fn pid_spelling(&self) -> Spelling {
        match (self.has(PID_FLOAT), self.has(PID_BOOL)) {
            (true, _) => Spelling::Float,
            (_, true) => Spelling::Bool,
            _ => Spelling::Plain,
        }
    }

    pub fn correlation(&self) -> Option<i64> {
        self.has(HAS_CORRELATION).then_some(self.correlation)
    }

    /// `args["graph node id"]` as the trace has it.
    pub fn node(&self) -> Node {
        if self.has(RECOVERED) {
            return Node::Missing;
        }
        self.current_node()
    }

    pub fn current_node(&self) -> Node {
        match self.node_kind {
            NodeIdKind::Missing => Node::Missing,
            NodeIdKind::Null => Node::Null,
            NodeIdKind::Zero => Node::Zero,
            NodeIdKind::Id => Node::Id(self.node_id()),
            NodeIdKind::Other => Node::Other,
        }
    }

    /// What the reference's `event["ts"]` would find.
    pub fn ts_field(&self) -> Field<Num> {
        match self.ts() {
            Some(ts) => Field::Value(ts),
            None if self.has(TS_NOT_NUMBER) => Field::Odd,
            None => Field::Missing,
        }
    }

    /// Whether `dur` is there but not a number.
    pub fn dur_is_odd(&self) -> bool {
        self.has(DUR_NOT_NUMBER)
    }

    pub fn ts(&self) -> Option<Num> {
        self.has(TS_SET).then(|| unpack(self.ts, self.has(TS_INT)))
    }

    pub fn dur(&self) -> Num {
        unpack(self.dur, self.has(DUR_INT))
    }

    pub fn current_tid(&self) -> KeyId {
        if self.has(LANE_SET) {
            self.new_tid
        } else {
            self.tid
        }
    }

    /// The new lane, if a pass moved the event.
    pub fn moved_to(&self) -> Option<KeyId> {
        (self.has(LANE_SET) && self.new_tid != self.tid).then_some(self.new_tid)
    }

    /// The repaired timestamp, if a pass changed it.
    pub fn new_ts(&self) -> Option<Num> {
        self.has(NEW_TS_SET).then(|| unpack(self.new_ts, self.has(NEW_TS_INT)))
    }

    pub fn current_ts(&self) -> Option<Num> {
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

    pub fn recovered_node(&self) -> Option<NodeId> {
        self.has(RECOVERED).then(|| self.node_id())
    }

    pub fn set_recovered(&mut self, node: NodeId) {
        self.flags |= RECOVERED;
        self.set_replay_marker(ReplayMarker::None);
        self.set_node(node);
    }

    /// The node whose annotation the event carries.
    pub fn annotation(&self) -> Option<NodeId> {
        (self.has(ANNOTATED) && self.node_kind == NodeIdKind::Id).then(|| self.node_id())
    }

    pub fn set_annotated(&mut self) {
        self.flags |= ANNOTATED;
    }

    /// Put the event on lane `lane` (the key of the integer stream id the caller knows),
    /// with `args["stream"]` saying so.
    pub fn set_lane(&mut self, lane: KeyId) {
        self.flags |= LANE_SET;
        self.new_tid = lane;
    }

    /// The lane a pass put the event on (its `args["stream"]` says the same).
    pub fn new_lane(&self) -> Option<KeyId> {
        self.has(LANE_SET).then_some(self.new_tid)
    }

    /// The `args["stream"]` a pass decided on.
    pub fn new_stream(&self, keys: &Keys) -> Option<i64> {
        if self.has(LANE_SET) {
            keys.key(self.new_tid).as_int()
        } else {
            None
        }
    }

    pub fn set_ts(&mut self, ts: Num) {
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
    pub fn changed(&self) -> bool {
        self.removed()
            || self.annotation().is_some()
            || self.has(RECOVERED)
            || self.replay_marker_change().is_some()
            || self.moved_to().is_some()
            || self.has(NEW_TS_SET)
            || (self.has(LANE_SET) && self.args_stream != self.new_tid)
    }
}

/// A flow-finish (`ac2g`, `ph: "f"`) event: where the arrow from a launch lands.
#[derive(Clone, Debug)]
pub struct Flow {
    pub ordinal: u32,
    pub pid: KeyId,
    pub tid: KeyId,
    /// The lane the reference moves it to.
    pub new_tid: KeyId,
    /// The tracked event whose final place it takes (cgfast's pipeline).
    pub follows: u32,
    ts: u64,
    flags: u8,
}

const FLOW_REMOVED: u8 = 1;
const FLOW_TS_SET: u8 = 2;
const FLOW_TS_INT: u8 = 4;

impl Flow {
    pub fn ts(&self) -> Option<Num> {
        (self.flags & FLOW_TS_SET != 0).then(|| unpack(self.ts, self.flags & FLOW_TS_INT != 0))
    }

    pub fn removed(&self) -> bool {
        self.flags & FLOW_REMOVED != 0
    }

    pub fn remove(&mut self) {
        self.flags |= FLOW_REMOVED;
    }

    pub fn current_tid(&self) -> KeyId {
        if self.new_tid == NONE {
            self.tid
        } else {
            self.new_tid
        }
    }
}

/// The name prefix of the profiler range cgfast's patched `CUDAGraph.replay` opens:
/// `cgfast.replay <executable graph id>`.
pub const STAMP_PREFIX: &str = "cgfast.replay";

/// A replay stamp: the graph its range names, and where and when the range ran.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stamp {
    pub pid: KeyId,
    pub tid: KeyId,
    pub start: f64,
    pub end: f64,
    pub graph: u32,
}

/// A `cudaGraphLaunch` call: its correlation, thread and start.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Launch {
    pub correlation: i64,
    pub pid: KeyId,
    pub tid: KeyId,
    pub ts: f64,
}

/// The graph a stamp's name gives, if it is well formed (`cgfast.replay 12`).
pub fn stamp_graph(name: &str) -> Option<u32> {
    let digits = name.strip_prefix(STAMP_PREFIX)?.strip_prefix(' ')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The index built in one pass over a trace.
#[derive(Default, Debug)]
pub struct TraceIndex {
    pub events: Vec<Tracked>,
    pub flows: Vec<Flow>,
    /// By key id: whether an untracked, non-metadata event sits on that lane.
    pub untracked_lanes: Vec<bool>,
    /// Correlation ids of `cudaGraphLaunch` calls.
    pub graph_launches: rustc_hash::FxHashSet<i64>,
    /// Every graph launch with a thread and a start, for matching to stamps.
    pub launches: Vec<Launch>,
    /// Replay stamps, in trace order.
    pub stamps: Vec<Stamp>,
    /// Ranges named `cgfast.replay...` that name no graph, or have no start or duration.
    pub malformed_stamps: u64,
    /// Some event's `args` has a `"graph id"`: the trace splits its node ids as torch
    /// 2.15's Cuspy profiler does, and recovered ones are written back split too.
    pub split_ids: bool,
    /// Some event is a scope span an earlier run of cgfast wrote.
    pub scope_spans: bool,
    pub keys: Keys,
    pub names: Strings,
    pub shapes: Vec<[u32; 6]>,
    shape_ids: rustc_hash::FxHashMap<[u32; 6], u32>,
    pub event_count: u64,
    /// The dict API's events and flows whose `ts` is not a number (or is absent), by the
    /// key Python would index them under (`None` for an absent one); the scanner sets
    /// none, so `append` has none to carry.
    odd_ts_keys: rustc_hash::FxHashMap<Kept, Key>,
}

/// How the ids of one appended segment map to those of the index it joins.
struct Renames {
    keys: Vec<KeyId>,
    names: Vec<u32>,
    shapes: Vec<u32>,
    offset: u32,
}

impl Renames {
    fn key(&self, id: KeyId) -> KeyId {
        renamed(&self.keys, id)
    }
}

fn renamed(map: &[u32], id: u32) -> u32 {
    if id == NONE {
        NONE
    } else {
        map[id as usize]
    }
}

/// What [`TraceIndex::observe`] kept of an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kept {
    Event(usize),
    Flow(usize),
    Lane,
}

impl TraceIndex {
    /// Note that an untracked event sits on `tid`.
    pub fn use_lane(&mut self, tid: KeyId) {
        let i = tid as usize;
        if self.untracked_lanes.len() <= i {
            self.untracked_lanes.resize(i + 1, false);
        }
        self.untracked_lanes[i] = true;
    }

    /// Record the key of a non-numeric `ts` (the dict API's flow index uses it).
    pub fn set_odd_ts_key(&mut self, kept: Kept, key: Key) {
        self.odd_ts_keys.insert(kept, key);
    }

    /// `ts` as a key of the reference's flow index: `None` when it has none.
    pub fn ts_key(&self, kept: Kept) -> Option<Key> {
        let ts = match kept {
            Kept::Event(i) => self.events[i].ts(),
            Kept::Flow(i) => self.flows[i].ts(),
            Kept::Lane => None,
        };
        ts.and_then(Key::from_num).or_else(|| self.odd_ts_keys.get(&kept).copied())
    }

    pub fn lane_used_by_untracked(&self, tid: KeyId) -> bool {
        self.untracked_lanes.get(tid as usize).copied().unwrap_or(false)
    }

    /// Record one event of `traceEvents`.
    pub fn observe(&mut self, ordinal: u32, ev: &Observed<'_>) -> Kept {
        self.event_count += 1;
        let tid = self.keys.id(ev.tid);
        let pid = ev.pid.map_or(NONE, |p| self.keys.id(p));
        if ev.cat == Cat::Runtime && ev.name.is_some_and(is_graph_launch) {
            if let Some(c) = ev.correlation {
                self.graph_launches.insert(c);
                if let Some(ts) = ev.ts.value() {
                    self.launches.push(Launch { correlation: c, pid, tid, ts: ts.as_f64() });
                }
            }
        }
        if ev.cat == Cat::CpuAnnotation && ev.name.is_some_and(|n| n.starts_with(STAMP_PREFIX)) {
            self.note_stamp(pid, tid, ev);
        }
        let ts = ev.ts.value().map(pack);
        if ev.cat == Cat::Ac2g && ev.ph == Ph::FlowFinish && ev.node == Node::Missing {
            let (value, int) = ts.unwrap_or((0, false));
            let flags = if ts.is_some() { FLOW_TS_SET | if int { FLOW_TS_INT } else { 0 } } else { 0 };
            self.flows.push(Flow { ordinal, pid, tid, new_tid: NONE, follows: NONE, ts: value, flags });
            return Kept::Flow(self.flows.len() - 1);
        }
        let tracked = ev.node != Node::Missing
            || ev.cat.is_work()
            || ev.cat == Cat::UserAnnotation
            || ev.ph == Ph::Meta;
        if !tracked {
            if ev.ph != Ph::Meta {
                self.use_lane(tid);
            }
            return Kept::Lane;
        }
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
            self.scope_spans = true;
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
        let name = match ev.name {
            Some(n) if ev.cat.is_work() || ev.node != Node::Missing => self.names.intern(n),
            _ => NONE,
        };
        let shape = ev.grid_block.map_or(NONE, |gb| self.shape_id(gb));
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
        let args_stream = ev.args_stream.map_or(NONE, |s| self.keys.id(s));
        self.events.push(Tracked {
            ordinal,
            cat: ev.cat,
            ph: ev.ph,
            flags,
            node_kind,
            pid,
            tid,
            args_stream,
            name,
            shape,
            new_tid: NONE,
            node,
            ts: ts.map_or(0, |t| t.0),
            dur: dur.map_or(0, |d| d.0),
            new_ts: 0,
            correlation: ev.correlation.unwrap_or(0),
        });
        Kept::Event(self.events.len() - 1)
    }

    fn note_stamp(&mut self, pid: KeyId, tid: KeyId, ev: &Observed<'_>) {
        let graph = ev.name.and_then(stamp_graph);
        match (graph, ev.ts.value(), ev.dur.value()) {
            (Some(graph), Some(ts), Some(dur)) => {
                let start = ts.as_f64();
                self.stamps.push(Stamp { pid, tid, start, end: start + dur.as_f64(), graph });
            }
            _ => self.malformed_stamps += 1,
        }
    }

    /// Add the index of the segment of `traceEvents` after this one, whose first event
    /// is element `offset`. Its events and flows move here: its vectors are left empty,
    /// their room kept for another segment.
    pub fn append(&mut self, next: &mut TraceIndex, offset: u32) {
        let keys: Vec<KeyId> =
            (0..next.keys.count() as KeyId).map(|id| self.keys.import(&next.keys, id)).collect();
        let names: Vec<u32> =
            (0..next.names.len() as u32).map(|id| self.names.intern(next.names.get(id))).collect();
        let shapes: Vec<u32> = next.shapes.iter().map(|gb| self.shape_id(*gb)).collect();
        for (id, used) in next.untracked_lanes.iter().enumerate() {
            if *used {
                self.use_lane(keys[id]);
            }
        }
        self.graph_launches.extend(std::mem::take(&mut next.graph_launches));
        self.event_count += next.event_count;
        self.malformed_stamps += std::mem::take(&mut next.malformed_stamps);
        self.split_ids |= next.split_ids;
        self.scope_spans |= next.scope_spans;
        let r = Renames { keys, names, shapes, offset };
        self.launches.extend(next.launches.drain(..).map(|l| Launch {
            pid: r.key(l.pid),
            tid: r.key(l.tid),
            ..l
        }));
        self.stamps.extend(next.stamps.drain(..).map(|s| Stamp {
            pid: r.key(s.pid),
            tid: r.key(s.tid),
            ..s
        }));
        self.events.extend(next.events.drain(..).map(|mut e| {
            e.ordinal += r.offset;
            e.pid = r.key(e.pid);
            e.tid = r.key(e.tid);
            e.args_stream = r.key(e.args_stream);
            e.new_tid = r.key(e.new_tid);
            e.name = renamed(&r.names, e.name);
            e.shape = renamed(&r.shapes, e.shape);
            e
        }));
        self.flows.extend(next.flows.drain(..).map(|mut f| {
            f.ordinal += r.offset;
            f.pid = r.key(f.pid);
            f.tid = r.key(f.tid);
            f.new_tid = r.key(f.new_tid);
            f
        }));
    }

    fn shape_id(&mut self, gb: [u32; 6]) -> u32 {
        let next = self.shapes.len() as u32;
        let id = *self.shape_ids.entry(gb).or_insert(next);
        if id == next {
            self.shapes.push(gb);
        }
        id
    }

    pub fn name_of(&self, event: &Tracked) -> &str {
        if event.name == NONE {
            "?"
        } else {
            self.names.get(event.name)
        }
    }

    pub fn shape_of(&self, event: &Tracked) -> Option<[u32; 6]> {
        (event.shape != NONE).then(|| self.shapes[event.shape as usize])
    }
}

pub fn is_graph_launch(name: &str) -> bool {
    matches!(
        name,
        "cudaGraphLaunch"
            | "cudaGraphLaunch_v10000"
            | "cuGraphLaunch"
            | "cuGraphLaunch_ptsz"
            | "cudaGraphLaunch_ptsz"
    )
}

#[cfg(test)]
mod size_tests {
    use std::mem::size_of;

    /// Memory grows by these with every tracked event and flow.
    #[test]
    fn index_entries_stay_small() {
        assert!(size_of::<super::Tracked>() <= 80);
        assert!(size_of::<super::Flow>() <= 32);
        assert!(size_of::<crate::read::scan::ByteSpan>() <= 16);
        assert!(size_of::<crate::read::scan::Places>() <= 20);
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
