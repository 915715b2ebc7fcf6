//! The three passes of the reference, as decisions on a [`TraceIndex`]: which lane
//! each graphed event goes to, what is noise, which lanes need names, which
//! overlapping kernels move aside, and which timestamps are jitter to repair.

use std::collections::{HashMap, HashSet};

use crate::annotations::Resolved;
use crate::key::{Key, Num};
use crate::trace::{Cat, Ph, TraceIndex};

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
    fn stream_of(&self, node: i64) -> Option<Option<i64>>;
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

impl<T: AsksLane> Lookup for HashMap<i64, T> {
    fn stream_of(&self, node: i64) -> Option<Option<i64>> {
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
    /// Lanes that get a new `thread_name`, in order.
    pub named_lanes: Vec<Key>,
}

/// `annotate_trace`: annotate and re-lane graphed events, drop replicated noise, tidy
/// the lane metadata.
pub fn annotate(index: &mut TraceIndex, annotations: &impl Lookup, default_stream: i64, link: FlowLink) -> Annotated {
    let mut flows_at: HashMap<(Option<Key>, Key, Key), Vec<u32>> = HashMap::new();
    for (i, e) in index.events.iter().enumerate() {
        if e.is_flow_finish() {
            if let Some(ts) = e.ts.and_then(Key::from_num) {
                let pid = if link == FlowLink::Follow { e.pid } else { None };
                flows_at.entry((pid, e.tid, ts)).or_default().push(i as u32);
            }
        }
    }

    let mut out = Annotated::default();
    for i in 0..index.events.len() {
        let e = &index.events[i];
        if e.odd || e.edit.removed || !e.current_node().annotatable() {
            continue;
        }
        let mut stream = None;
        if let crate::trace::Node::Id(node) = e.current_node() {
            if let Some(asked) = annotations.stream_of(node) {
                out.annotated += 1;
                stream = asked;
                index.events[i].edit.annotation = Some(node);
            }
        }
        let e = &index.events[i];
        let stream = stream.unwrap_or(default_stream);
        let old_ts = e.ts.and_then(Key::from_num);
        let old_key = old_ts.map(|ts| (if link == FlowLink::Follow { e.pid } else { None }, e.tid, ts));
        let edit = &mut index.events[i].edit;
        edit.tid = Some(Key::Int(stream));
        edit.args_stream = Some(stream);
        for &f in old_key.and_then(|k| flows_at.get(&k)).into_iter().flatten() {
            let flow = &mut index.events[f as usize].edit;
            flow.tid = Some(Key::Int(stream));
            if link == FlowLink::Follow {
                flow.follows = Some(i as u32);
            }
        }
    }

    let work_tids: HashSet<Key> = index.events.iter().filter(|e| e.cat.is_work()).map(|e| e.current_tid()).collect();
    for e in index.events.iter_mut() {
        if (e.cat == Cat::UserAnnotation || e.is_flow_finish()) && !work_tids.contains(&e.current_tid()) {
            e.edit.removed = true;
            out.noise_removed += 1;
        }
    }

    let mut used_tids = index.untracked_tids.clone();
    used_tids.extend(index.events.iter().filter(|e| !e.edit.removed && e.ph != Ph::Meta).map(|e| e.current_tid()));
    out.gpu_pid = index
        .events
        .iter()
        .find(|e| !e.edit.removed && e.stream_thread_name)
        .map_or(Key::Int(0), |e| e.pid.unwrap_or(Key::Int(0)));
    for e in index.events.iter_mut() {
        if e.ph == Ph::Meta && !e.edit.removed && !used_tids.contains(&e.current_tid()) {
            e.edit.removed = true;
            out.metadata_removed += 1;
        }
    }
    out.named_lanes = unnamed_lanes(index, work_tids);
    out
}

/// Lanes in `lanes` that no surviving `thread_name` names, sorted.
fn unnamed_lanes(index: &TraceIndex, lanes: HashSet<Key>) -> Vec<Key> {
    let named: HashSet<Key> = index.events.iter().filter(|e| e.thread_name && !e.edit.removed).map(|e| e.current_tid()).collect();
    let mut missing: Vec<Key> = lanes.into_iter().filter(|t| !named.contains(t)).collect();
    missing.sort_by(|a, b| index.keys.sort_cmp(*a, *b));
    missing
}

/// Graphed work events that the lane passes may reorder: indices into `index.events`.
fn lane_candidates(index: &TraceIndex, kernels_only: bool) -> impl Iterator<Item = usize> + '_ {
    index.events.iter().enumerate().filter_map(move |(i, e)| {
        let kind_ok = if kernels_only { e.cat == Cat::Kernel } else { e.cat.is_work() };
        (kind_ok && !e.odd && !e.edit.removed && e.current_node().graphed()).then_some(i)
    })
}

fn sort_by_ts(index: &TraceIndex, events: &mut [usize]) {
    events.sort_by(|&a, &b| {
        let (x, y) = (index.events[a].current_ts(), index.events[b].current_ts());
        match (x, y) {
            (Some(x), Some(y)) => x.py_cmp(y).unwrap_or(std::cmp::Ordering::Equal),
            _ => std::cmp::Ordering::Equal,
        }
    });
}

/// `_move_overlapping_to_stream`: graphed kernels on `default_stream` that start
/// before the previous one ended go to `overlap_stream`.
pub fn move_overlapping(index: &mut TraceIndex, default_stream: i64, overlap_stream: i64) -> u64 {
    let lane = Key::Int(default_stream);
    let mut events: Vec<usize> = lane_candidates(index, true).filter(|&i| index.events[i].current_tid() == lane).collect();
    sort_by_ts(index, &mut events);
    let mut moved = 0;
    let mut prev_end = Num::Float(0.0);
    for i in events {
        let e = &mut index.events[i];
        let ts = e.current_ts().expect("candidates have a ts");
        if ts.lt(prev_end) {
            e.edit.tid = Some(Key::Int(overlap_stream));
            e.edit.args_stream = Some(overlap_stream);
            moved += 1;
        } else {
            prev_end = ts.add(e.dur);
        }
    }
    moved
}

/// An overlap too large to be timestamp jitter, left as it is.
#[derive(Clone, Debug, PartialEq)]
pub struct LargeOverlap {
    pub event: usize,
    pub tid: Key,
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
    let mut lanes: Vec<Vec<usize>> = Vec::new();
    let mut lane_of: HashMap<Key, usize> = HashMap::new();
    for i in lane_candidates(index, false).collect::<Vec<_>>() {
        let tid = index.events[i].current_tid();
        let slot = *lane_of.entry(tid).or_insert_with(|| {
            lanes.push(Vec::new());
            lanes.len() - 1
        });
        lanes[slot].push(i);
    }
    let limit = Num::Float(max_adjust_us);
    let mut out = Fixed::default();
    for mut events in lanes {
        sort_by_ts(index, &mut events);
        let mut prev_end = Num::Float(0.0);
        for i in events {
            let e = &mut index.events[i];
            let ts = e.current_ts().expect("candidates have a ts");
            if ts.lt(prev_end) {
                let overlap = prev_end.sub(ts);
                if limit.lt(overlap) {
                    out.large.push(LargeOverlap { event: i, tid: e.current_tid(), overlap_us: overlap.as_f64() });
                } else {
                    e.edit.ts = Some(prev_end);
                    out.fixed += 1;
                }
            }
            prev_end = e.current_ts().expect("candidates have a ts").add(e.dur);
        }
    }
    out
}

/// cgfast's fixes after the reference passes: flow arrows take their event's final
/// place, and lanes the later passes filled (the overlap lane) get a name too.
pub fn settle(index: &mut TraceIndex, annotated: &mut Annotated) {
    for i in 0..index.events.len() {
        let Some(target) = index.events[i].edit.follows else { continue };
        if index.events[i].edit.removed {
            continue;
        }
        let t = &index.events[target as usize];
        let (tid, ts) = (t.current_tid(), t.current_ts());
        let edit = &mut index.events[i].edit;
        edit.tid = Some(tid);
        if ts != index.events[i].ts {
            index.events[i].edit.ts = ts;
        }
    }
    let work: HashSet<Key> = index.events.iter().filter(|e| e.cat.is_work() && !e.edit.removed).map(|e| e.current_tid()).collect();
    let already: HashSet<Key> = annotated.named_lanes.iter().copied().collect();
    let extra: Vec<Key> = unnamed_lanes(index, work).into_iter().filter(|t| !already.contains(t)).collect();
    annotated.named_lanes.extend(extra);
}
