//! The three passes of the reference, as decisions on a [`TraceIndex`]: which lane
//! each graphed event goes to, what is noise, which lanes need names, which
//! overlapping kernels move aside, and which timestamps are jitter to repair.

use std::cmp::Ordering;

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use crate::annotations::Resolved;
use crate::key::{Key, KeyId, Num, Spelling};
use crate::trace::{Cat, Node, NodeId, Ph, TraceIndex, NONE};

/// Which flow-finish events follow a graphed event when it changes lanes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowLink {
    /// The reference: flows at the event's `(tid, ts)`, moved once, by `annotate_trace`.
    AtTidTs,
    /// cgfast's pipeline: flows at the event's `(pid, tid, ts)` end wherever it ends.
    Follow,
}

/// The annotations a pass can look up by node id.
pub trait Lookup {
    /// `None` when the node has no annotation, else the lane it asks for.
    fn stream_of(&self, node: NodeId) -> Option<Option<i64>>;
}

/// A resolved annotation: what lane it asks for.
pub trait AsksLane {
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
pub struct Annotated {
    pub annotated: u64,
    pub noise_removed: u64,
    pub metadata_removed: u64,
    /// The pid of the GPU process (of the first `stream ...` thread name; 0 if none).
    pub gpu_pid: Key,
    pub gpu_pid_spelling: Spelling,
    /// The tracked event that `gpu_pid` was read from.
    pub gpu_pid_event: Option<usize>,
    /// Lanes that get a new `thread_name`, in order, spelled as their first work event
    /// has them (Python's set of lanes keeps the first of equal values).
    pub named_lanes: Vec<(KeyId, Spelling)>,
}

/// `annotate_trace`: annotate and re-lane graphed events, drop replicated noise, tidy
/// the lane metadata.
pub fn annotate(index: &mut TraceIndex, annotations: &impl Lookup, default_stream: i64, link: FlowLink) -> Annotated {
    // Flows by a hash of their (tid, ts): the first flow, then a chain through the others
    // (which may include other places that hash alike: lookups check).
    let place_of = |tid: KeyId, ts: Option<Num>| -> Option<(KeyId, Key)> { ts.and_then(Key::from_num).map(|ts| (tid, ts)) };
    let hash = |place: &(KeyId, Key)| {
        use std::hash::{BuildHasher, Hash, Hasher};
        let mut h = rustc_hash::FxBuildHasher.build_hasher();
        place.hash(&mut h);
        h.finish()
    };
    let mut first_at: HashMap<u64, u32> = HashMap::with_capacity_and_hasher(index.flows.len(), Default::default());
    let mut next_at: Vec<u32> = vec![NONE; index.flows.len()];
    for (i, f) in index.flows.iter().enumerate().rev() {
        if let Some(place) = place_of(f.tid, f.ts()) {
            if let Some(prev) = first_at.insert(hash(&place), i as u32) {
                next_at[i] = prev;
            }
        }
    }

    let mut out = Annotated::default();
    let mut lanes: HashMap<i64, KeyId> = HashMap::default();
    for i in 0..index.events.len() {
        let e = &index.events[i];
        // The reference re-lanes annotatable events and the flows at their (tid, ts);
        // cgfast's flows also end wherever the last work event at their (pid, tid, ts)
        // ends, graphed or not.
        let relane = !e.odd() && e.current_node().annotatable();
        let claims = link == FlowLink::Follow && e.cat.is_work();
        if !relane && !claims {
            continue;
        }
        let mut lane = None;
        if relane {
            let mut stream = None;
            if let Node::Id(node) = e.current_node() {
                if let Some(asked) = annotations.stream_of(node) {
                    out.annotated += 1;
                    index.events[i].set_annotated();
                    stream = asked;
                }
            }
            let stream = stream.unwrap_or(default_stream);
            lane = Some(*lanes.entry(stream).or_insert_with(|| index.keys.id(Key::Int(stream))));
        }
        let e = &mut index.events[i];
        let (pid, place) = (e.pid, place_of(e.tid, e.ts()));
        if let Some(lane) = lane {
            e.set_lane(lane);
        }
        let Some(place) = place else { continue };
        let mut f = first_at.get(&hash(&place)).copied().unwrap_or(NONE);
        while f != NONE {
            let flow = &mut index.flows[f as usize];
            if place_of(flow.tid, flow.ts()) == Some(place) {
                if let Some(lane) = lane {
                    flow.new_tid = lane;
                }
                if claims && flow.pid == pid {
                    flow.follows = i as u32;
                }
            }
            f = next_at[f as usize];
        }
    }

    let mut work_lanes = LaneSet::new(&index.keys);
    for e in index.events.iter().filter(|e| e.cat.is_work()) {
        work_lanes.insert(e.current_tid());
    }
    let is_noise_kind = |e: &crate::trace::Tracked| e.cat == Cat::UserAnnotation || (e.cat == Cat::Ac2g && e.ph == Ph::FlowFinish);
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
    if let Some((i, e)) = index.events.iter().enumerate().find(|(_, e)| !e.removed() && e.stream_thread_name()) {
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

/// A set of lanes, by key id.
pub struct LaneSet {
    member: Vec<bool>,
}

impl LaneSet {
    fn new(keys: &crate::key::Keys) -> LaneSet {
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
    let named: HashSet<KeyId> = index.events.iter().filter(|e| e.thread_name() && !e.removed()).map(|e| e.current_tid()).collect();
    let mut missing: Vec<KeyId> = lanes.iter().filter(|t| !named.contains(t)).collect();
    missing.sort_by(|a, b| index.keys.sort_cmp(index.keys.key(*a), index.keys.key(*b)));
    missing
        .into_iter()
        .map(|lane| {
            let first = index.events.iter().find(|e| e.cat.is_work() && !e.removed() && e.current_tid() == lane);
            (lane, first.map_or(Spelling::Plain, |e| e.current_tid_spelling()))
        })
        .collect()
}

/// Graphed work events the lane passes may reorder, with their start times (exact in
/// an `f64`: the index keeps only integers it can hold exactly).
fn lane_candidates(index: &TraceIndex, kernels_only: bool) -> Vec<(f64, u32)> {
    index
        .events
        .iter()
        .enumerate()
        .filter_map(|(i, e)| {
            let kind_ok = if kernels_only { e.cat == Cat::Kernel } else { e.cat.is_work() };
            if kind_ok && !e.odd() && !e.removed() && e.current_node().graphed() {
                e.current_ts().map(|ts| (ts.as_f64(), i as u32))
            } else {
                None
            }
        })
        .collect()
}

/// Sort by start time, stably like Python's `sorted`.
fn sort_by_ts(events: &mut [(f64, u32)]) {
    sort_stably(events, |e| e.0.is_nan(), |a, b| a.0.partial_cmp(&b.0).unwrap_or(Ordering::Equal), |e| (float_order(e.0), e.1));
}

/// `items.sort_by(compare)`, faster. Without NaN (which makes `compare` inconsistent),
/// `key` must order as `compare` does and then by input position: that is a total
/// order, so an unstable sort by it gives the same result.
pub(crate) fn sort_stably<T, K: Ord>(items: &mut [T], is_nan: impl Fn(&T) -> bool, compare: impl Fn(&T, &T) -> Ordering, key: impl Fn(&T) -> K) {
    if items.iter().any(is_nan) {
        items.sort_by(compare);
    } else {
        items.sort_unstable_by_key(key);
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

/// `_move_overlapping_to_stream`: graphed kernels on `default_stream` that start
/// before the previous one ended go to `overlap_stream`.
pub fn move_overlapping(index: &mut TraceIndex, default_stream: i64, overlap_stream: i64) -> u64 {
    let Some(lane) = index.keys.find(Key::Int(default_stream)) else { return 0 };
    let overlap_lane = index.keys.id(Key::Int(overlap_stream));
    let mut events = lane_candidates(index, true);
    events.retain(|&(_, i)| index.events[i as usize].current_tid() == lane);
    sort_by_ts(&mut events);
    let mut moved = 0;
    let mut prev_end = Num::Float(0.0);
    for (_, i) in events {
        let e = &mut index.events[i as usize];
        let ts = e.current_ts().expect("candidates have a start");
        if ts.lt(prev_end) {
            e.set_lane(overlap_lane);
            moved += 1;
        } else {
            prev_end = ts.add(e.dur());
        }
    }
    moved
}

/// An overlap too large to be timestamp jitter, left as it is.
#[derive(Clone, Debug, PartialEq)]
pub struct LargeOverlap {
    pub event: usize,
    pub tid: KeyId,
    pub overlap_us: f64,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Fixed {
    pub fixed: u64,
    pub large: Vec<LargeOverlap>,
}

/// `_fix_overlapping_timestamps`: per lane, a graphed work event that starts at most
/// `max_adjust_us` before the previous one ends is moved to that end.
pub fn fix_timestamps(index: &mut TraceIndex, max_adjust_us: f64) -> Fixed {
    // One list sorted by (lane in order of first appearance, start), stably: the lanes
    // are walked in the order the reference's dict of lanes has them.
    let mut rank_of: Vec<u32> = vec![NONE; index.keys.count()];
    let mut lanes = 0u32;
    let mut events: Vec<(u32, f64, u32)> = lane_candidates(index, false)
        .into_iter()
        .map(|(ts, i)| {
            let lane = index.events[i as usize].current_tid() as usize;
            if rank_of[lane] == NONE {
                rank_of[lane] = lanes;
                lanes += 1;
            }
            (rank_of[lane], ts, i)
        })
        .collect();
    sort_stably(&mut events, |e| e.1.is_nan(), |a, b| a.0.cmp(&b.0).then(a.1.partial_cmp(&b.1).unwrap_or(Ordering::Equal)), |e| (e.0, float_order(e.1), e.2));
    let limit = Num::Float(max_adjust_us);
    let mut out = Fixed::default();
    let mut lane = NONE;
    let mut prev_end = Num::Float(0.0);
    for (rank, _, i) in events {
        if rank != lane {
            lane = rank;
            prev_end = Num::Float(0.0);
        }
        let i = i as usize;
        let e = &mut index.events[i];
        let ts = e.current_ts().expect("candidates have a start");
        let mut start = ts;
        if ts.lt(prev_end) {
            let overlap = prev_end.sub(ts);
            if limit.lt(overlap) {
                out.large.push(LargeOverlap { event: i, tid: e.current_tid(), overlap_us: overlap.as_f64() });
            } else {
                e.set_ts(prev_end);
                start = prev_end;
                out.fixed += 1;
            }
        }
        prev_end = start.add(e.dur());
    }
    out
}

/// cgfast's fixes after the reference passes: flow arrows take their event's final
/// place, and lanes the later passes filled (the overlap lane) get a name too.
pub fn settle(index: &mut TraceIndex, annotated: &mut Annotated) {
    let mut work = LaneSet::new(&index.keys);
    for e in index.events.iter().filter(|e| e.cat.is_work() && !e.removed()) {
        work.insert(e.current_tid());
    }
    let already: HashSet<KeyId> = annotated.named_lanes.iter().map(|(lane, _)| *lane).collect();
    let extra: Vec<(KeyId, Spelling)> = unnamed_lanes(index, &work).into_iter().filter(|(t, _)| !already.contains(t)).collect();
    annotated.named_lanes.extend(extra);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{Field, Observed};

    struct Ev {
        cat: &'static str,
        ph: &'static str,
        tid: i64,
        ts: f64,
        dur: f64,
        node: Option<i64>,
        name: Option<&'static str>,
        stream_name: bool,
    }

    fn ev(cat: &'static str, tid: i64, ts: f64, dur: f64, node: Option<i64>) -> Ev {
        Ev { cat, ph: if cat == "ac2g" { "f" } else { "X" }, tid, ts, dur, node, name: None, stream_name: false }
    }

    fn meta(tid: i64, stream_name: bool) -> Ev {
        Ev { cat: "", ph: "M", tid, ts: 0.0, dur: 0.0, node: None, name: Some("thread_name"), stream_name }
    }

    fn index(events: &[Ev]) -> TraceIndex {
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
                node: e.node.map_or(Node::Missing, |n| if n == 0 { Node::Zero } else { Node::Id(n as NodeId) }),
                args_stream: None,
                args_name_is_stream: e.stream_name,
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

    fn annotations(pairs: &[(i64, Option<i64>)]) -> rustc_hash::FxHashMap<NodeId, Resolved> {
        pairs.iter().map(|&(n, s)| (n as NodeId, Resolved { writes: vec![], stream: s })).collect()
    }

    #[test]
    fn annotate_relanes_graphed_events_and_their_flows() {
        let mut idx = index(&[ev("kernel", 7, 10.0, 5.0, Some(1)), ev("ac2g", 7, 10.0, 0.0, None), ev("kernel", 7, 20.0, 5.0, Some(2)), ev("kernel", 9, 30.0, 1.0, Some(0))]);
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
        assert_eq!(out.named_lanes.iter().map(|&(t, _)| idx.keys.key(t)).collect::<Vec<_>>(), vec![Key::Int(61)]);
    }

    #[test]
    fn overlapping_kernels_move_aside() {
        let mut idx = index(&[ev("kernel", 7, 0.0, 10.0, Some(1)), ev("kernel", 7, 5.0, 2.0, Some(2)), ev("kernel", 7, 10.0, 1.0, Some(3)), ev("gpu_memcpy", 7, 10.5, 1.0, Some(4))]);
        assert_eq!(move_overlapping(&mut idx, 7, 8), 1);
        assert_eq!(lanes(&idx), vec![7, 8, 7, 7]);
    }

    #[test]
    fn jitter_is_repaired_and_large_overlaps_are_reported() {
        let mut idx = index(&[ev("kernel", 7, 0.0, 10.0, Some(1)), ev("kernel", 7, 9.5, 2.0, Some(2)), ev("kernel", 7, 9.0, 1.0, Some(3)), ev("kernel", 8, 100.0, 1.0, Some(4))]);
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
        let mut idx = index(&[ev("kernel", 7, 0.0, 10.0, Some(1)), ev("kernel", 7, 5.0, 2.0, Some(2)), meta(7, true)]);
        let mut out = annotate(&mut idx, &annotations(&[]), 7, FlowLink::Follow);
        assert!(out.named_lanes.is_empty());
        move_overlapping(&mut idx, 7, 8);
        settle(&mut idx, &mut out);
        assert_eq!(out.named_lanes.iter().map(|&(t, _)| idx.keys.key(t)).collect::<Vec<_>>(), vec![Key::Int(8)]);
    }
}
