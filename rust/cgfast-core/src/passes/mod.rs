//! The three passes of the reference, as decisions on a [`TraceIndex`]: which lane
//! each graphed event goes to, what is noise, which lanes need names, which
//! overlapping kernels move aside, and which timestamps are jitter to repair.

mod flow_table;
pub(crate) mod lanes;
pub(crate) mod names;
pub(crate) mod recover;
pub(crate) mod spans;

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use crate::annotations::Resolved;
use crate::index::keys::{Key, KeyId, Num, Spelling};
use crate::index::{pack, unpack, Cat, Kept, Node, NodeId, Ph, TraceIndex, Tracked, NONE};
use flow_table::{place_of, FlowsByPlace};
use lanes::LanePasses;

/// Which flow-finish events follow a graphed event when it changes lanes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FlowLink {
    /// The reference: flows at the event's `(tid, ts)`, moved once, by `annotate_trace`.
    AtTidTs,
    /// cgfast's pipeline: flows at the event's `(pid, tid, ts)` end wherever it ends.
    Follow,
}

/// The annotations a pass can look up by node id.
pub(crate) trait Lookup {
    /// `None` when the node has no annotation, else the lane it asks for.
    fn stream_of(&self, node: NodeId) -> Option<Option<i64>>;
}

/// A resolved annotation: what lane it asks for.
pub(crate) trait AsksLane {
    fn lane(&self) -> Option<i64>;
}

impl AsksLane for Resolved {
    fn lane(&self) -> Option<i64> {
        self.stream
    }
}

impl<T: AsksLane, S: std::hash::BuildHasher> Lookup for std::collections::HashMap<NodeId, T, S> {
    fn stream_of(&self, node: NodeId) -> Option<Option<i64>> {
        self.get(&node).map(AsksLane::lane)
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Annotated {
    pub(crate) annotated: u64,
    pub(crate) noise_removed: u64,
    pub(crate) metadata_removed: u64,
    /// The pid of the GPU process (of the first `stream ...` thread name; 0 if none).
    pub(crate) gpu_pid: Key,
    pub(crate) gpu_pid_spelling: Spelling,
    /// The tracked event that `gpu_pid` was read from.
    pub(crate) gpu_pid_event: Option<usize>,
    /// Lanes that get a new `thread_name`, in order, spelled as their first work event
    /// has them (Python's set of lanes keeps the first of equal values).
    pub(crate) named_lanes: Vec<(KeyId, Spelling)>,
}

/// `annotate_trace`: annotate and re-lane graphed events, drop replicated noise, tidy
/// the lane metadata.
pub(crate) fn annotate(
    index: &mut TraceIndex,
    annotations: &impl Lookup,
    default_stream: i64,
    link: FlowLink,
) -> Annotated {
    let annotated = relane(index, annotations, default_stream, link);
    let visits = FlowVisits::find(index, link);
    after_relane(index, link, annotated, visits)
}

/// Step 2 of `annotate_trace` for the events alone: each takes the lane its annotation
/// asks for, or `default_stream`. How many were annotated.
pub(crate) fn relane(
    index: &mut TraceIndex,
    annotations: &impl Lookup,
    default_stream: i64,
    link: FlowLink,
) -> u64 {
    relane_with(index, annotations, default_stream, link, Relane::Move { kept: None })
}

/// How [`relane_with`] treats the lanes.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Relane {
    /// Every event takes the lane its annotation asks for, but those an earlier run moved
    /// to the `kept` lane (the overlap stream) stay there: on its own output the overlap
    /// pass then finds what it left, even where the timestamp repair since took an
    /// event's overlap away.
    Move { kept: Option<i64> },
    /// Only count and mark: every event keeps the lane it ran on (`--lanes none`).
    Keep,
}

/// [`relane`], with the lanes treated as `lanes` says.
pub(crate) fn relane_with(
    index: &mut TraceIndex,
    annotations: &impl Lookup,
    default_stream: i64,
    link: FlowLink,
    lanes_are: Relane,
) -> u64 {
    let mut annotated = 0;
    let kept = match lanes_are {
        Relane::Move { kept: Some(stream) } => index.keys.find(Key::Int(stream)),
        _ => None,
    };
    let mut lanes: HashMap<i64, KeyId> = HashMap::default();
    for i in 0..index.events.len() {
        if !relanes(&index.events[i], link) {
            continue;
        }
        let mut stream = None;
        if let Node::Id(node) = index.events[i].current_node() {
            if let Some(asked) = annotations.stream_of(node) {
                annotated += 1;
                index.events[i].set_annotated();
                stream = asked;
            }
        }
        let e = &index.events[i];
        if matches!(lanes_are, Relane::Keep) || (kept == Some(e.tid) && e.moved_earlier()) {
            continue;
        }
        let stream = stream.unwrap_or(default_stream);
        let lane = *lanes.entry(stream).or_insert_with(|| index.keys.id(Key::Int(stream)));
        index.events[i].set_lane(lane);
    }
    annotated
}

/// The flows at the places of the events that move them: found once the events have
/// their lanes, moved by [`after_relane`]. Only the table's chains are kept meanwhile.
pub(crate) struct FlowVisits {
    chains: FlowsByPlace,
    /// Each visited event with the first flow of its slot; looked up here and walked
    /// after, so that the lookups' cache misses overlap.
    visits: Vec<(u32, u32)>,
}

impl FlowVisits {
    pub(crate) fn find(index: &TraceIndex, link: FlowLink) -> FlowVisits {
        let mut flows = FlowsByPlace::new(index);
        let mut visits: Vec<(u32, u32)> = Vec::with_capacity(index.flows.len());
        for (i, e) in index.events.iter().enumerate() {
            if !relanes(e, link) && !claims_flows(e, link) {
                continue;
            }
            if let Some(first) = place_of(index, e.tid, Kept::Event(i)).and_then(|place| flows.first(&place))
            {
                visits.push((i as u32, first));
            }
        }
        flows.first_at = Vec::new();
        FlowVisits { chains: flows, visits }
    }
}

/// The rest of `annotate_trace` once events have their lanes: flows move with them,
/// noise goes, lanes get names.
pub(crate) fn after_relane(
    index: &mut TraceIndex,
    link: FlowLink,
    annotated: u64,
    visits: FlowVisits,
) -> Annotated {
    let mut out = Annotated { annotated, ..Annotated::default() };
    move_flows(index, &visits.chains, visits.visits, link);

    let mut work_lanes = LaneSet::new(&index.keys);
    for e in index.events.iter().filter(|e| e.cat.is_work()) {
        work_lanes.insert(e.current_tid());
    }
    let is_noise_kind =
        |e: &Tracked| e.cat == Cat::UserAnnotation || (e.cat == Cat::Ac2g && e.ph == Ph::FlowFinish);
    for e in index.events.iter_mut().filter(|e| is_noise_kind(e)) {
        if !work_lanes.contains(e.current_tid()) {
            e.remove();
            out.noise_removed += 1;
        }
    }
    for f in index.flows.iter_mut() {
        if !work_lanes.contains(f.current_tid()) {
            f.remove();
            out.noise_removed += 1;
        }
    }

    let mut used = LaneSet::new(&index.keys);
    for e in index.events.iter().filter(|e| !e.removed() && e.ph != Ph::Meta) {
        used.insert(e.current_tid());
    }
    for f in index.flows.iter().filter(|f| !f.removed()) {
        used.insert(f.current_tid());
    }
    if let Some((i, e)) =
        index.events.iter().enumerate().find(|(_, e)| !e.removed() && e.stream_thread_name())
    {
        out.gpu_pid = if e.pid == NONE { Key::Int(0) } else { index.keys.key(e.pid) };
        out.gpu_pid_spelling = e.pid_spelling();
        out.gpu_pid_event = Some(i);
    }
    for i in 0..index.events.len() {
        let e = &index.events[i];
        let tid = e.current_tid();
        if e.ph == Ph::Meta && !e.removed() && !used.contains(tid) && !index.lane_used_by_untracked(tid) {
            index.events[i].remove();
            out.metadata_removed += 1;
        }
    }
    out.named_lanes = unnamed_lanes(index, &work_lanes);
    out
}

// The reference re-lanes annotatable events, whatever their ts and dur, and the flows
// at their (tid, ts); cgfast's pipeline passes odd events through, and its flows also
// end wherever the last work event at their (pid, tid, ts) ends, graphed or not.
fn relanes(e: &Tracked, link: FlowLink) -> bool {
    (link == FlowLink::AtTidTs || !e.odd()) && e.current_node().annotatable()
}

fn claims_flows(e: &Tracked, link: FlowLink) -> bool {
    link == FlowLink::Follow && e.cat.is_work()
}

/// Flows at the place of each visited event (with the first flow whose place hashes
/// alike), in order, take its lane where it changed lanes, and follow it where it is
/// work of their process.
fn move_flows(index: &mut TraceIndex, flows: &FlowsByPlace, visits: Vec<(u32, u32)>, link: FlowLink) {
    let mut moves = Vec::new();
    for (event, first) in visits {
        let i = event as usize;
        let e = &index.events[i];
        let (pid, lane, claims) = (e.pid, relanes(e, link).then(|| e.current_tid()), claims_flows(e, link));
        let place = place_of(index, e.tid, Kept::Event(i)).expect("visited events have a place");
        moves.extend(flows.at(index, place, first).map(|f| (f, claims && index.flows[f].pid == pid)));
        for (f, follows) in moves.drain(..) {
            let flow = &mut index.flows[f];
            if let Some(lane) = lane {
                flow.new_tid = lane;
            }
            if follows {
                flow.follows = event;
            }
        }
    }
}

/// A set of lanes, by key id.
pub(crate) struct LaneSet {
    member: Vec<bool>,
}

impl LaneSet {
    fn new(keys: &crate::index::keys::Keys) -> LaneSet {
        LaneSet { member: vec![false; keys.count()] }
    }

    fn insert(&mut self, lane: KeyId) {
        let i = lane as usize;
        if i >= self.member.len() {
            self.member.resize(i + 1, false);
        }
        self.member[i] = true;
    }

    fn contains(&self, lane: KeyId) -> bool {
        self.member.get(lane as usize).copied().unwrap_or(false)
    }

    fn iter(&self) -> impl Iterator<Item = KeyId> + '_ {
        self.member.iter().enumerate().filter(|(_, m)| **m).map(|(i, _)| i as KeyId)
    }
}

/// Lanes in `lanes` that no surviving `thread_name` names, sorted.
fn unnamed_lanes(index: &TraceIndex, lanes: &LaneSet) -> Vec<(KeyId, Spelling)> {
    let named: HashSet<KeyId> =
        index.events.iter().filter(|e| e.thread_name() && !e.removed()).map(|e| e.current_tid()).collect();
    let mut missing: Vec<KeyId> = lanes.iter().filter(|t| !named.contains(t)).collect();
    missing.sort_by(|a, b| index.keys.sort_cmp(index.keys.key(*a), index.keys.key(*b)));
    missing
        .into_iter()
        .map(|lane| {
            let first =
                index.events.iter().find(|e| e.cat.is_work() && !e.removed() && e.current_tid() == lane);
            (lane, first.map_or(Spelling::Plain, |e| e.current_tid_spelling()))
        })
        .collect()
}

/// How the lane passes treat a candidate whose `ts` or `dur` is not a number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OddEvents {
    /// Leave it where it is (the file pipeline passes odd events through).
    Skip,
    /// Refuse the trace where the reference's Python would fail on it (the dict API).
    Refuse,
}

/// Why the reference would fail on an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// `event["ts"]` raises `KeyError`.
    NoTs,
    /// `ts < prev_end` raises `TypeError`.
    TsNotANumber,
    /// `ts + dur` raises `TypeError`.
    DurNotANumber,
}

/// A lane pass that refused a trace: nothing was changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Refused {
    pub(crate) event: usize,
    pub(crate) why: Refusal,
}

/// Whether the lane passes may reorder an event: graphed work (or a graphed kernel).
pub(crate) fn is_lane_candidate(e: &Tracked, kernels_only: bool, odd: OddEvents) -> bool {
    let usable = odd == OddEvents::Refuse || !e.odd();
    let kind_ok = if kernels_only { e.cat == Cat::Kernel } else { e.cat.is_work() };
    kind_ok && usable && !e.removed() && e.current_node().graphed()
}

/// A lane candidate with the fields the lane passes read, gathered in index order so
/// that walking them in start order does not visit the index at random.
#[derive(Clone, Copy)]
pub(crate) struct Timed {
    ts: u64,
    dur: u64,
    pub(crate) event: u32,
    /// The lane, in the plan's own table of lanes, above four flag bits (so that a
    /// candidate takes 24 bytes: the plan sorts all of them).
    lane_flags: u32,
}

const TIMED_TS_INT: u32 = 1;
const TIMED_DUR_INT: u32 = 2;
const TIMED_DUR_ODD: u32 = 4;
const TIMED_KERNEL: u32 = 8;
const TIMED_FLAG_BITS: u32 = 4;
/// How many lanes a plan can number.
pub(crate) const TIMED_LANES: u32 = 1 << (32 - TIMED_FLAG_BITS);

impl Timed {
    pub(crate) fn new(event: usize, ts: Num, e: &Tracked) -> Timed {
        let flag = |int: bool, flag: u32| if int { flag } else { 0 };
        let ((ts, ts_int), (dur, dur_int)) = (pack(ts), pack(e.dur()));
        let odd = flag(e.dur_is_odd(), TIMED_DUR_ODD);
        let kernel = flag(e.cat == Cat::Kernel, TIMED_KERNEL);
        Timed {
            ts,
            dur,
            event: event as u32,
            lane_flags: flag(ts_int, TIMED_TS_INT) | flag(dur_int, TIMED_DUR_INT) | odd | kernel,
        }
    }

    fn flags(&self) -> u32 {
        self.lane_flags & ((1 << TIMED_FLAG_BITS) - 1)
    }

    pub(crate) fn lane(&self) -> u32 {
        self.lane_flags >> TIMED_FLAG_BITS
    }

    /// Set the lane, below [`TIMED_LANES`].
    pub(crate) fn set_lane(&mut self, lane: u32) {
        self.lane_flags = lane << TIMED_FLAG_BITS | self.flags();
    }

    pub(crate) fn ts(&self) -> Num {
        unpack(self.ts, self.flags() & TIMED_TS_INT != 0)
    }

    pub(crate) fn is_kernel(&self) -> bool {
        self.flags() & TIMED_KERNEL != 0
    }

    fn event(&self) -> usize {
        self.event as usize
    }

    /// `ts + dur` from `start`, refused where `dur` is not a number.
    pub(crate) fn end_from(&self, start: Num) -> Result<Num, Refused> {
        if self.flags() & TIMED_DUR_ODD != 0 {
            return Err(Refused { event: self.event(), why: Refusal::DurNotANumber });
        }
        Ok(start.py_add(unpack(self.dur, self.flags() & TIMED_DUR_INT != 0)))
    }
}

/// Sort stably by start like Python's `sorted`. Where every start is exact as a float
/// and none is NaN, (start, position) is a total order that gives the same result, and
/// a sort by it as integers is faster.
pub(crate) fn sort_by_start<T>(items: &mut [T], start: impl Fn(&T) -> Num, position: impl Fn(&T) -> usize) {
    if items.iter().all(|t| is_plain_start(start(t))) {
        let key = |t: &T| float_order(start(t).as_f64());
        if items.is_sorted_by_key(&position) {
            // stable: ties keep position order; each key is made once
            items.sort_by_cached_key(key);
        } else {
            items.sort_unstable_by_key(|t| (key(t), position(t)));
        }
    } else {
        items.sort_by(|a, b| start(a).py_cmp(start(b)).unwrap_or(std::cmp::Ordering::Equal));
    }
}

/// Whether a start is exact as a float and not NaN: starts that are all plain sort by
/// [`float_order`] as Python sorts them.
pub(crate) fn is_plain_start(n: Num) -> bool {
    const EXACT: i64 = 1 << 53;
    match n {
        Num::Int(i) => (-EXACT..=EXACT).contains(&i),
        Num::Float(f) => !f.is_nan(),
    }
}

/// A float that is not NaN as an integer of the same order (`-0.0` equal to `0.0`).
pub(crate) fn float_order(f: f64) -> u64 {
    let bits = if f == 0.0 { 0 } else { f.to_bits() };
    if bits >> 63 == 1 {
        !bits
    } else {
        bits | 1 << 63
    }
}

/// One lane walked in start order, as both lane passes walk it: where the work before
/// ended so far.
#[derive(Clone, Copy)]
pub(crate) struct LaneWalk {
    prev_end: Num,
}

/// What `_fix_overlapping_timestamps` does with an event.
pub(crate) enum Fix {
    Kept,
    /// Moved to start where the work before it ended.
    Moved(Num),
    /// An overlap (µs) too large to be jitter: left as it is.
    TooLarge(f64),
}

impl LaneWalk {
    pub(crate) fn new() -> LaneWalk {
        LaneWalk { prev_end: Num::Float(0.0) }
    }

    /// `_move_overlapping_to_stream`'s step: whether `t` starts before the kernel before
    /// it ended (it moves, and the lane's end stays).
    pub(crate) fn overlaps(&mut self, t: &Timed) -> Result<bool, Refused> {
        if t.ts().lt(self.prev_end) {
            return Ok(true);
        }
        self.prev_end = t.end_from(t.ts())?;
        Ok(false)
    }

    /// `_fix_overlapping_timestamps`'s step: an event that starts at most `limit` before
    /// the work before it ended moves to that end.
    pub(crate) fn fix(&mut self, t: &Timed, limit: Num) -> Result<Fix, Refused> {
        let ts = t.ts();
        let fix = if ts.lt(self.prev_end) {
            let overlap = self.prev_end.py_sub(ts);
            if limit.lt(overlap) {
                Fix::TooLarge(overlap.as_f64())
            } else {
                Fix::Moved(self.prev_end)
            }
        } else {
            Fix::Kept
        };
        self.prev_end = t.end_from(if let Fix::Moved(to) = fix { to } else { ts })?;
        Ok(fix)
    }
}

/// `_move_overlapping_to_stream` on the events the pipeline can order.
#[cfg(test)]
pub(crate) fn move_overlapping(index: &mut TraceIndex, default_stream: i64, overlap_stream: i64) -> u64 {
    // skipped odd events leave nothing to refuse
    move_overlapping_or_refuse(index, default_stream, overlap_stream, OddEvents::Skip).unwrap_or(0)
}

/// `_move_overlapping_to_stream`: graphed kernels on `default_stream` that start
/// before the previous one ended go to `overlap_stream` (see [`crate::passes::lanes`]).
pub(crate) fn move_overlapping_or_refuse(
    index: &mut TraceIndex,
    default_stream: i64,
    overlap_stream: i64,
    odd: OddEvents,
) -> Result<u64, Refused> {
    lanes::run(
        index,
        LanePasses { overlap: Some((default_stream, overlap_stream)), max_adjust_us: None, odd },
    )
    .moved
}

/// An overlap too large to be timestamp jitter, left as it is.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct LargeOverlap {
    pub(crate) event: usize,
    pub(crate) tid: KeyId,
    pub(crate) overlap_us: f64,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Fixed {
    pub(crate) fixed: u64,
    pub(crate) large: Vec<LargeOverlap>,
}

/// `_fix_overlapping_timestamps` on the events the pipeline can order.
#[cfg(test)]
pub(crate) fn fix_timestamps(index: &mut TraceIndex, max_adjust_us: f64) -> Fixed {
    // skipped odd events leave nothing to refuse
    fix_timestamps_or_refuse(index, max_adjust_us, OddEvents::Skip).unwrap_or_default()
}

/// `_fix_overlapping_timestamps`: per lane, a graphed work event that starts at most
/// `max_adjust_us` before the previous one ends is moved to that end (see
/// [`crate::passes::lanes`]).
pub(crate) fn fix_timestamps_or_refuse(
    index: &mut TraceIndex,
    max_adjust_us: f64,
    odd: OddEvents,
) -> Result<Fixed, Refused> {
    lanes::run(index, LanePasses { overlap: None, max_adjust_us: Some(max_adjust_us), odd }).fixed
}

/// cgfast's fixes after the reference passes: flow arrows take their event's final
/// place, and lanes the later passes filled (the overlap lane) get a name too.
pub(crate) fn settle(index: &mut TraceIndex, annotated: &mut Annotated) {
    let mut work = LaneSet::new(&index.keys);
    for e in index.events.iter().filter(|e| e.cat.is_work() && !e.removed()) {
        work.insert(e.current_tid());
    }
    let already: HashSet<KeyId> = annotated.named_lanes.iter().map(|(lane, _)| *lane).collect();
    let extra: Vec<(KeyId, Spelling)> =
        unnamed_lanes(index, &work).into_iter().filter(|(t, _)| !already.contains(t)).collect();
    annotated.named_lanes.extend(extra);
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::index::Field;
    use crate::read::ingest::Observed;

    pub(crate) struct Ev {
        cat: &'static str,
        pub(crate) ph: &'static str,
        tid: i64,
        ts: f64,
        dur: f64,
        node: Option<i64>,
        name: Option<&'static str>,
        stream_name: bool,
    }

    pub(crate) fn ev(cat: &'static str, tid: i64, ts: f64, dur: f64, node: Option<i64>) -> Ev {
        Ev {
            cat,
            ph: if cat == "ac2g" { "f" } else { "X" },
            tid,
            ts,
            dur,
            node,
            name: None,
            stream_name: false,
        }
    }

    fn meta(tid: i64, stream_name: bool) -> Ev {
        Ev { cat: "", ph: "M", tid, ts: 0.0, dur: 0.0, node: None, name: Some("thread_name"), stream_name }
    }

    pub(crate) fn index(events: &[Ev]) -> TraceIndex {
        let mut index = TraceIndex::default();
        for (i, e) in events.iter().enumerate() {
            let observed = Observed {
                ph: Ph::from_name(e.ph),
                cat: Cat::from_name(e.cat),
                name: e.name,
                pid: Some(Key::Int(0)),
                tid: Key::Int(e.tid),
                pid_spelling: Spelling::Plain,
                tid_spelling: Spelling::Plain,
                ts: Field::Value(Num::Float(e.ts)),
                dur: Field::Value(Num::Float(e.dur)),
                args: Field::Value(()),
                node: e
                    .node
                    .map_or(Node::Missing, |n| if n == 0 { Node::Zero } else { Node::Id(n as NodeId) }),
                args_stream: None,
                args_name_is_stream: e.stream_name,
                scope_span: false,
                moved_earlier: false,
                replay_marker: crate::index::ReplayMarker::None,
                correlation: None,
                grid_block: None,
            };
            index.observe(i as u32, &observed);
        }
        index
    }

    fn lanes(index: &TraceIndex) -> Vec<i64> {
        index.events.iter().map(|e| index.keys.key(e.current_tid()).as_int().unwrap()).collect()
    }

    pub(crate) fn annotations(pairs: &[(i64, Option<i64>)]) -> rustc_hash::FxHashMap<NodeId, Resolved> {
        pairs.iter().map(|&(n, s)| (n as NodeId, Resolved { writes: vec![], stream: s })).collect()
    }

    #[test]
    fn annotate_relanes_graphed_events_and_their_flows() {
        let mut idx = index(&[
            ev("kernel", 7, 10.0, 5.0, Some(1)),
            ev("ac2g", 7, 10.0, 0.0, None),
            ev("kernel", 7, 20.0, 5.0, Some(2)),
            ev("kernel", 9, 30.0, 1.0, Some(0)),
        ]);
        let out = annotate(&mut idx, &annotations(&[(1, Some(60))]), 7, FlowLink::Follow);
        assert_eq!(out.annotated, 1);
        assert_eq!(lanes(&idx), vec![60, 7, 9]);
        assert_eq!(idx.keys.key(idx.flows[0].current_tid()), Key::Int(60));
        assert_eq!(idx.flows[0].follows, 0);
        assert_eq!(idx.events[0].annotation(), Some(1));
        assert_eq!(idx.events[1].annotation(), None);
        assert_eq!(idx.events[1].new_stream(&idx.keys), Some(7));
        assert_eq!(idx.events[2].new_stream(&idx.keys), None, "graph node id 0 is not graphed");
    }

    #[test]
    fn noise_on_lanes_without_work_is_removed_and_lanes_get_names() {
        let mut idx = index(&[
            ev("kernel", 7, 10.0, 5.0, Some(1)),
            ev("gpu_user_annotation", 7, 10.0, 5.0, None),
            ev("gpu_user_annotation", 20, 10.0, 5.0, None),
            ev("ac2g", 20, 10.0, 0.0, None),
            meta(20, true),
            meta(7, true),
        ]);
        let out = annotate(&mut idx, &annotations(&[(1, Some(61))]), 7, FlowLink::AtTidTs);
        // the kernel left lane 7 for 61, so lane 7's annotation is noise too
        assert_eq!(out.noise_removed, 3);
        assert!(idx.events[1].removed() && idx.events[2].removed() && idx.flows[0].removed());
        assert_eq!(out.metadata_removed, 2, "both lanes 20 and 7 are left without events");
        assert_eq!(
            out.named_lanes.iter().map(|&(t, _)| idx.keys.key(t)).collect::<Vec<_>>(),
            vec![Key::Int(61)]
        );
    }

    #[test]
    fn overlapping_kernels_move_aside() {
        let mut idx = index(&[
            ev("kernel", 7, 0.0, 10.0, Some(1)),
            ev("kernel", 7, 5.0, 2.0, Some(2)),
            ev("kernel", 7, 10.0, 1.0, Some(3)),
            ev("gpu_memcpy", 7, 10.5, 1.0, Some(4)),
        ]);
        assert_eq!(move_overlapping(&mut idx, 7, 8), 1);
        assert_eq!(lanes(&idx), vec![7, 8, 7, 7]);
    }

    #[test]
    fn jitter_is_repaired_and_large_overlaps_are_reported() {
        let mut idx = index(&[
            ev("kernel", 7, 0.0, 10.0, Some(1)),
            ev("kernel", 7, 9.5, 2.0, Some(2)),
            ev("kernel", 7, 9.0, 1.0, Some(3)),
            ev("kernel", 8, 100.0, 1.0, Some(4)),
        ]);
        let fixed = fix_timestamps(&mut idx, 1.0);
        // sorted by ts: 0.0 (end 10), 9.0 -> 10.0 (end 11), 9.5 overlaps by 1.5: too large
        assert_eq!(fixed.fixed, 1);
        assert_eq!(idx.events[2].new_ts(), Some(Num::Float(10.0)));
        assert_eq!(fixed.large.len(), 1);
        assert_eq!(fixed.large[0].event, 1);
        assert!((fixed.large[0].overlap_us - 1.5).abs() < 1e-9);
    }

    #[test]
    fn settle_names_the_overlap_lane() {
        let mut idx =
            index(&[ev("kernel", 7, 0.0, 10.0, Some(1)), ev("kernel", 7, 5.0, 2.0, Some(2)), meta(7, true)]);
        let mut out = annotate(&mut idx, &annotations(&[]), 7, FlowLink::Follow);
        assert!(out.named_lanes.is_empty());
        move_overlapping(&mut idx, 7, 8);
        settle(&mut idx, &mut out);
        assert_eq!(
            out.named_lanes.iter().map(|&(t, _)| idx.keys.key(t)).collect::<Vec<_>>(),
            vec![Key::Int(8)]
        );
    }

    /// Kernels (or, with no node, flows) on lane 7 with integer times.
    fn int_index(events: &[(i64, Field<Num>, Option<i64>)]) -> TraceIndex {
        let mut index = TraceIndex::default();
        for (i, &(ts, dur, node)) in events.iter().enumerate() {
            let (cat, ph) =
                if node.is_some() { (Cat::Kernel, Ph::Other) } else { (Cat::Ac2g, Ph::FlowFinish) };
            let observed = Observed {
                ph,
                cat,
                name: None,
                pid: Some(Key::Int(0)),
                tid: Key::Int(7),
                pid_spelling: Spelling::Plain,
                tid_spelling: Spelling::Plain,
                ts: Field::Value(Num::Int(ts)),
                dur,
                args: Field::Value(()),
                node: node.map_or(Node::Missing, |n| Node::Id(n as NodeId)),
                args_stream: None,
                args_name_is_stream: false,
                scope_span: false,
                moved_earlier: false,
                replay_marker: crate::index::ReplayMarker::None,
                correlation: None,
                grid_block: None,
            };
            index.observe(i as u32, &observed);
        }
        index
    }

    const EPOCH_NS: i64 = 1_733_212_345_678_901_234;

    fn int(n: i64) -> Field<Num> {
        Field::Value(Num::Int(n))
    }

    #[test]
    fn epoch_nanosecond_times_are_annotated_with_their_flows() {
        let mut idx =
            int_index(&[(EPOCH_NS, int(3), Some(1)), (EPOCH_NS, int(0), None), (EPOCH_NS + 1, int(0), None)]);
        let out = annotate(&mut idx, &annotations(&[(1, Some(60))]), 7, FlowLink::AtTidTs);
        assert_eq!(out.annotated, 1);
        assert_eq!(lanes(&idx), vec![60]);
        assert_eq!(idx.keys.key(idx.flows[0].current_tid()), Key::Int(60));
        assert_eq!(idx.flows[1].new_tid, NONE, "one nanosecond later is another place");
    }

    #[test]
    fn epoch_nanosecond_times_overlap_and_repair_exactly() {
        let events =
            [(EPOCH_NS, int(3), Some(1)), (EPOCH_NS + 2, int(2), Some(2)), (EPOCH_NS + 5, int(1), Some(3))];
        let mut idx = int_index(&events);
        assert_eq!(move_overlapping(&mut idx, 7, 8), 1);
        assert_eq!(lanes(&idx), vec![7, 8, 7]);
        let mut idx = int_index(&events);
        let fixed = fix_timestamps(&mut idx, 1.0);
        assert_eq!(fixed.fixed, 1);
        assert_eq!(idx.events[1].new_ts(), Some(Num::Int(EPOCH_NS + 3)));
    }

    #[test]
    fn odd_durations_are_skipped_or_refused_as_python_would() {
        let events = [(10, Field::Odd, Some(1)), (5, int(10), Some(2))];
        let mut idx = int_index(&events);
        assert_eq!(move_overlapping(&mut idx, 7, 8), 0, "the pipeline leaves odd events alone");
        let mut idx = int_index(&events);
        // sorted: 5 (ends 15), then 10 overlaps and moves: its dur is never added
        assert_eq!(move_overlapping_or_refuse(&mut idx, 7, 8, OddEvents::Refuse), Ok(1));
        let mut idx = int_index(&events);
        let refused = fix_timestamps_or_refuse(&mut idx, 1.0, OddEvents::Refuse);
        assert_eq!(refused, Err(Refused { event: 0, why: Refusal::DurNotANumber }));
        assert_eq!(idx.events[1].new_ts(), None, "a refused trace is left unchanged");
    }
}
