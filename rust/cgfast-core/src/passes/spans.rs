//! Scope spans: for each replay on each lane, every maximal run of consecutive graphed
//! events whose annotation value of a dotted key (`module`: `model.layers.0.attn`)
//! starts with a prefix becomes one `gpu_user_annotation` event over the run, so that
//! viewers show the nested scopes of a graph replay as they show eager ranges.
//!
//! Events that overlap on a lane (by more than the repaired jitter) form one cluster
//! whose path is the common prefix of theirs (none where they belong to different
//! replays): a span never starts or ends inside an event, so spans on a lane are always
//! nested or disjoint, and an event lies inside the span of its whole value unless it
//! overlaps an event of another value (then of their common prefix).
//!
//! The spans are found in one walk over the events, each lane keeping only its open
//! spans and the cluster it is gathering, so that memory grows with the spans, not with
//! the trace. That needs a lane's events in start order. A lane whose events come out of
//! it (one that holds events of several streams) is walked again, each event held back
//! until no later one can start before it: by the walk before, none starts more than
//! the lane's skew before one listed earlier, so only the events of a skew's time are
//! held.

use std::sync::atomic::{AtomicBool, Ordering};

use rustc_hash::FxHashMap as HashMap;

use crate::index::keys::{KeyId, Num, Spelling};
use crate::index::{NodeId, TraceIndex, Tracked, NONE};
use crate::passes::{is_lane_candidate, OddEvents};

/// A scope span: a prefix of the key's value over a run of events on one lane.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Span {
    /// The dotted prefix, by index in [`Spans::names`].
    pub(crate) name: u32,
    /// Whether the event it starts with has an integer start: its times are written as
    /// integers where they are whole.
    pub(crate) integer: bool,
    /// Start and end in nanoseconds ([`ticks`]) from [`Spans::base`].
    pub(crate) start: i64,
    pub(crate) end: i64,
}

/// The spans of a trace, with their names and lanes kept once each.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Spans {
    pub(crate) names: Vec<String>,
    /// (pid, lane, how the first event there spells them).
    pub(crate) lanes: Vec<(KeyId, KeyId, Spelling, Spelling)>,
    pub(crate) base: i128,
    /// Each lane's spans (by index in `lanes`), in the order they open.
    pub(crate) spans: Vec<Vec<Span>>,
}

/// A time in whole nanoseconds, as viewers read microseconds: integers exactly, floats
/// rounded (`None`: not finite). Spans are laid out in these, so that a viewer finds
/// each event inside its spans however its floats round.
pub(crate) fn ticks(n: Num) -> Option<i128> {
    match n {
        Num::Int(i) => Some(i as i128 * 1000),
        Num::Float(f) if f.is_finite() && f.abs() < 1e30 => {
            let ns = f * 1000.0;
            // a float converts to 64 bits in one instruction, to 128 in a call
            Some(if ns.abs() < 9e18 { round_to_i64(ns) as i128 } else { ns.round() as i128 })
        }
        Num::Float(_) => None,
    }
}

/// `x.round() as i64` for `|x| < 9e18`, without the call `round` is on processors
/// before SSE4.1: the truncation is one instruction and the fraction it leaves exact.
fn round_to_i64(x: f64) -> i64 {
    let magnitude = x.abs();
    let whole = magnitude as i64;
    let rounded = whole + i64::from(magnitude - whole as f64 >= 0.5);
    if x < 0.0 {
        -rounded
    } else {
        rounded
    }
}

impl Spans {
    pub(crate) fn len(&self) -> usize {
        self.spans.iter().map(Vec::len).sum()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.spans.iter().all(Vec::is_empty)
    }
}

/// One graphed event: its lane's index, its position, its value's chain of prefixes
/// (`NONE`: no value), whether its start is an integer, and its start and end
/// ([`ticks`] from the base).
#[derive(Clone, Copy)]
struct Placed {
    lane: u32,
    event: u32,
    chain: u32,
    integer: bool,
    start: i64,
    end: i64,
}

/// What places events: the tables of names, chains and lanes, filled as events come.
struct Places<'a, F> {
    value_of: F,
    names: Vec<String>,
    name_ids: HashMap<&'a str, u32>,
    /// each value as the names of its prefixes, shortest first
    chains: Vec<Vec<u32>>,
    chain_of: ChainOf,
    lanes: Vec<(KeyId, KeyId, Spelling, Spelling)>,
    lane_ids: HashMap<(KeyId, KeyId), u32>,
    base: Option<i128>,
    /// The last lane, asked again and again.
    last_lane: Option<((KeyId, KeyId), u32)>,
}

/// Each node's chain, once looked up: for the usual ids (`graph << 32 | local`, a graph's
/// nodes numbered from 0) in a table per graph by local id, the last graph's at hand. A
/// table grows only by about what it holds, so that ids far apart (which go to a map)
/// cost no more memory than their events.
#[derive(Default)]
struct ChainOf {
    tables: Vec<Vec<u32>>,
    table_of: HashMap<i64, u32>,
    last: Option<(i64, u32)>,
    other: HashMap<NodeId, u32>,
}

/// Not looked up yet.
const UNSEEN: u32 = NONE - 1;

impl ChainOf {
    /// Where `node`'s chain is kept (`UNSEEN` until it is).
    fn slot(&mut self, node: NodeId) -> &mut u32 {
        let graph = match i64::try_from(node >> 32) {
            Ok(graph) if node >= 0 => graph,
            _ => return self.other.entry(node).or_insert(UNSEEN),
        };
        let local = (node & 0xffff_ffff) as usize;
        let table = match self.last {
            Some((last, table)) if last == graph => table,
            _ => {
                let tables = &mut self.tables;
                let table = *self.table_of.entry(graph).or_insert_with(|| {
                    tables.push(Vec::new());
                    tables.len() as u32 - 1
                });
                self.last = Some((graph, table));
                table
            }
        };
        let table = &mut self.tables[table as usize];
        if local >= table.len() {
            if local > 2 * table.len() + 16 {
                // a node looked up here before its table reaches it is looked up again
                // once it does: its chain is made twice, alike
                return self.other.entry(node).or_insert(UNSEEN);
            }
            table.resize(local + 1, UNSEEN);
        }
        &mut table[local]
    }
}

impl<'a, F: Fn(NodeId) -> Option<&'a str>> Places<'a, F> {
    /// Where event `i` lies, if it is a graphed event with a usable time.
    fn place(&mut self, i: usize, e: &Tracked) -> Option<Placed> {
        if !is_lane_candidate(e, false, OddEvents::Skip) {
            return None;
        }
        let ts = e.current_ts()?;
        let (start, dur) = (ticks(ts)?, ticks(e.dur())?);
        let base = *self.base.get_or_insert(start);
        // a trace spanning centuries has no spans past them
        let (Ok(start), Ok(end)) = (i64::try_from(start - base), i64::try_from(start + dur - base)) else {
            return None;
        };
        let chain = match e.annotation() {
            Some(node) => {
                let chain = *self.chain_of.slot(node);
                if chain == UNSEEN {
                    let chain = self.chain(node);
                    *self.chain_of.slot(node) = chain;
                    chain
                } else {
                    chain
                }
            }
            None => NONE,
        };
        let place = (e.pid, e.current_tid());
        let lane = match self.last_lane {
            Some((last, lane)) if last == place => lane,
            _ => {
                let lane = *self.lane_ids.entry(place).or_insert_with(|| {
                    self.lanes.push((e.pid, e.current_tid(), e.pid_spelling(), e.current_tid_spelling()));
                    self.lanes.len() as u32 - 1
                });
                self.last_lane = Some((place, lane));
                lane
            }
        };
        let integer = matches!(ts, Num::Int(_));
        Some(Placed { lane, event: i as u32, chain, integer, start, end })
    }

    /// The lane of an event that a walk placed, as [`Places::place`] found it.
    fn walked_lane(&self, e: &Tracked) -> Option<u32> {
        if !is_lane_candidate(e, false, OddEvents::Skip) {
            return None;
        }
        let place = (e.pid, e.current_tid());
        match self.last_lane {
            Some((last, lane)) if last == place => Some(lane),
            _ => self.lane_ids.get(&place).copied(),
        }
    }

    /// The chain of a node's value (`NONE`: it has none).
    fn chain(&mut self, node: NodeId) -> u32 {
        let Some(value) = (self.value_of)(node) else { return NONE };
        let chain = prefixes(value)
            .map(|prefix| {
                *self.name_ids.entry(prefix).or_insert_with(|| {
                    self.names.push(prefix.to_string());
                    self.names.len() as u32 - 1
                })
            })
            .collect();
        self.chains.push(chain);
        self.chains.len() as u32 - 1
    }
}

/// Finds the spans of every lane, from the events' final lanes and starts, as work that
/// can stop and go on on another thread (so that a thread which only takes what the
/// machine has spare can start it, and the one that needs the spans finish it).
pub(crate) struct SpanFinder<'i, 'a, F> {
    index: &'i TraceIndex,
    places: Places<'a, F>,
    lanes: Vec<LaneSpans>,
    walk: Walk,
    /// The next event of the walk.
    next: usize,
}

/// Which walk the finder is on.
enum Walk {
    First,
    /// Walking again the lanes whose events came out of start order.
    Again(Vec<HeldBack>),
    Done,
}

/// Events walked between looks at the stop flag.
const STOP_EVERY: usize = 1 << 10;

impl<'i, 'a, F: Fn(NodeId) -> Option<&'a str>> SpanFinder<'i, 'a, F> {
    /// `value_of` gives the key's value for an annotated node.
    pub(crate) fn new(index: &'i TraceIndex, value_of: F) -> Self {
        let places = Places {
            value_of,
            names: Vec::new(),
            name_ids: HashMap::default(),
            chains: Vec::new(),
            chain_of: ChainOf::default(),
            lanes: Vec::new(),
            lane_ids: HashMap::default(),
            base: None,
            last_lane: None,
        };
        SpanFinder { index, places, lanes: Vec::new(), walk: Walk::First, next: 0 }
    }

    /// Walk on until done (`true`) or until `stop` is set.
    pub(crate) fn run(&mut self, stop: &AtomicBool) -> bool {
        let events = &self.index.events;
        loop {
            let (from, to) = (self.next, events.len().min(self.next + STOP_EVERY));
            let steps = (from..to).zip(&events[from..to]);
            match &mut self.walk {
                Walk::First => steps.for_each(|(i, e)| first(&mut self.places, &mut self.lanes, i, e)),
                Walk::Again(held) => {
                    steps.for_each(|(i, e)| again(&mut self.places, &mut self.lanes, held, i, e));
                }
                Walk::Done => return true,
            }
            self.next = to;
            if to == events.len() {
                self.end_walk();
            }
            if stop.load(Ordering::Relaxed) {
                return matches!(self.walk, Walk::Done);
            }
        }
    }

    /// After the first walk, walk again where a lane came out of start order; after
    /// that, push the events still held back.
    fn end_walk(&mut self) {
        self.next = 0;
        self.walk = match std::mem::replace(&mut self.walk, Walk::Done) {
            Walk::First if self.lanes.iter().any(|lane| lane.skew.is_some()) => {
                for lane in self.lanes.iter_mut().filter(|lane| lane.skew.is_some()) {
                    lane.latest = i64::MIN;
                }
                Walk::Again(self.lanes.iter().map(|_| HeldBack::default()).collect())
            }
            Walk::Again(held) => {
                for (lane, mut held) in self.lanes.iter_mut().zip(held) {
                    held.release(i64::MAX, lane, &self.places.chains);
                }
                Walk::Done
            }
            _ => Walk::Done,
        };
    }

    /// The spans, once [`SpanFinder::run`] is done.
    pub(crate) fn finish(self) -> Spans {
        assert!(matches!(self.walk, Walk::Done), "the spans were not all found");
        let places = self.places;
        Spans {
            names: places.names,
            lanes: places.lanes,
            base: places.base.unwrap_or(0),
            spans: self.lanes.into_iter().map(|lane| lane.finish(&places.chains)).collect(),
        }
    }
}

/// Event `i` on the first walk: a lane's events while they come in start order.
fn first<'a, F: Fn(NodeId) -> Option<&'a str>>(
    places: &mut Places<'a, F>,
    lanes: &mut Vec<LaneSpans>,
    i: usize,
    e: &Tracked,
) {
    let Some(p) = places.place(i, e) else { return };
    if p.lane as usize == lanes.len() {
        lanes.push(LaneSpans::new());
    }
    let lane = &mut lanes[p.lane as usize];
    if p.start < lane.latest || lane.skew.is_some() {
        // out of start order: the lane is walked again; how far back events go
        let skew = lane.skew.unwrap_or(0).max(lane.latest.saturating_sub(p.start));
        *lane = LaneSpans { skew: Some(skew), latest: lane.latest.max(p.start), ..LaneSpans::new() };
        return;
    }
    lane.push(p, e.correlation(), &places.chains);
}

/// Event `i` on the walk again: held back on its lane until no event to come can start
/// before it.
fn again<'a, F: Fn(NodeId) -> Option<&'a str>>(
    places: &mut Places<'a, F>,
    lanes: &mut [LaneSpans],
    held: &mut [HeldBack],
    i: usize,
    e: &Tracked,
) {
    // the lanes walked again are known: the others' events need not be placed again
    if places.walked_lane(e).is_none_or(|lane| lanes[lane as usize].skew.is_none()) {
        return;
    }
    let Some(p) = places.place(i, e) else { return };
    let (lane, held) = (&mut lanes[p.lane as usize], &mut held[p.lane as usize]);
    let Some(skew) = lane.skew else { return };
    lane.latest = lane.latest.max(p.start);
    held.hold(p, e.correlation());
    if held.due() {
        held.release(lane.latest.saturating_sub(skew), lane, &places.chains);
    }
}

/// The dotted prefixes of a path, shortest first.
fn prefixes(path: &str) -> impl Iterator<Item = &str> {
    path.match_indices('.').map(move |(i, _)| &path[..i]).chain((!path.is_empty()).then_some(path))
}

/// The events that start before the ones before them end: its path is the common
/// prefix of their chains.
#[derive(Clone, Copy)]
struct Cluster {
    integer: bool,
    start: i64,
    end: i64,
    replay: Option<i64>,
    /// The path: the first `depth` names of chain `chain` (`NONE`: no event has one).
    chain: u32,
    depth: u32,
    one_replay: bool,
}

/// One lane's spans, its events given in start order: a run ends where the replay
/// changes.
struct LaneSpans {
    spans: Vec<Span>,
    /// The spans open now, outermost first: (name, position in `spans`). Their ends
    /// are the last cluster's, written when they close.
    open: Vec<(u32, u32)>,
    open_replay: Option<Option<i64>>,
    last_end: i64,
    cluster: Option<Cluster>,
    /// The latest start so far (`i64::MIN` before the first event).
    latest: i64,
    /// Where events came out of start order: how far (ns) one started before one listed
    /// earlier, at most.
    skew: Option<i64>,
}

/// The events of a lane walked again that are held back until none to come can start
/// before them. They are released in batches, sorted: events that come nearly in start
/// order sort at little more than the cost of a pass over them, which is cheaper than
/// keeping them in a heap one by one.
#[derive(Default)]
struct HeldBack {
    events: Vec<(Placed, Option<i64>)>,
    /// How many were left held by the last release.
    kept: usize,
}

/// Events held before a release is worth a sort, at the least.
const RELEASE_EVERY: usize = 256;

impl HeldBack {
    fn hold(&mut self, p: Placed, replay: Option<i64>) {
        self.events.push((p, replay));
    }

    /// Whether enough came since the last release (as many again as it kept, so that
    /// each event is sorted a few times at most, and memory stays within twice what a
    /// skew's time holds).
    fn due(&self) -> bool {
        self.events.len() >= self.kept * 2 + RELEASE_EVERY
    }

    /// Push the events that start by `bound` onto `lane`, in start order.
    fn release(&mut self, bound: i64, lane: &mut LaneSpans, chains: &[Vec<u32>]) {
        self.events.sort_unstable_by_key(|(p, _)| (p.start, p.event));
        let due = self.events.partition_point(|(p, _)| p.start <= bound);
        for (p, replay) in self.events.drain(..due) {
            lane.push(p, replay, chains);
        }
        self.kept = self.events.len();
    }
}

impl LaneSpans {
    fn new() -> LaneSpans {
        LaneSpans {
            spans: Vec::new(),
            open: Vec::new(),
            open_replay: None,
            last_end: 0,
            cluster: None,
            latest: i64::MIN,
            skew: None,
        }
    }

    fn push(&mut self, p: Placed, replay: Option<i64>, chains: &[Vec<u32>]) {
        self.latest = self.latest.max(p.start);
        let chain_len = |chain: u32| if chain == NONE { 0 } else { chains[chain as usize].len() as u32 };
        if let Some(c) = self.cluster.as_mut().filter(|c| p.start < c.end) {
            c.one_replay &= replay == c.replay;
            if p.chain != NONE {
                if c.chain == NONE {
                    (c.chain, c.depth) = (p.chain, chain_len(p.chain));
                } else {
                    let (path, other) =
                        (&chains[c.chain as usize][..c.depth as usize], &chains[p.chain as usize]);
                    c.depth = path.iter().zip(other).take_while(|(a, b)| a == b).count() as u32;
                }
            }
            c.end = c.end.max(p.end);
            return;
        }
        if let Some(c) = self.cluster.take() {
            self.close(c, chains);
        }
        self.cluster = Some(Cluster {
            integer: p.integer,
            start: p.start,
            end: p.end,
            replay,
            chain: p.chain,
            depth: chain_len(p.chain),
            one_replay: true,
        });
    }

    /// The cluster's path continues the open spans it shares, and opens the rest.
    fn close(&mut self, c: Cluster, chains: &[Vec<u32>]) {
        let path: &[u32] = match c.chain {
            NONE => &[],
            _ if !c.one_replay => &[],
            chain => &chains[chain as usize][..c.depth as usize],
        };
        if self.open_replay != Some(c.replay) {
            self.end_open(0);
            self.open_replay = Some(c.replay);
        }
        let depth = self.open.iter().zip(path).take_while(|((open, _), name)| open == *name).count();
        self.end_open(depth);
        for &name in &path[depth..] {
            self.open.push((name, self.spans.len() as u32));
            self.spans.push(Span { name, integer: c.integer, start: c.start, end: c.end });
        }
        self.last_end = c.end;
    }

    /// End the open spans from `depth` on where the last cluster ended.
    fn end_open(&mut self, depth: usize) {
        for &(_, s) in &self.open[depth..] {
            self.spans[s as usize].end = self.last_end;
        }
        self.open.truncate(depth);
    }

    fn finish(mut self, chains: &[Vec<u32>]) -> Vec<Span> {
        if let Some(c) = self.cluster.take() {
            self.close(c, chains);
        }
        self.end_open(0);
        self.spans
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::read::scan::WriteKeys;

    /// Kernels of replays of 100 on two lanes, one of them out of start order here and
    /// there, more than a stop's worth; modules by node.
    fn skewed_trace(dir: &std::path::Path) -> TraceIndex {
        let events: Vec<String> = (0..3 * STOP_EVERY as i64)
            .map(|i| {
                let (tid, late) = (7 + i % 2, if i % 14 == 1 { 25 } else { 0 });
                let (ts, node, replay) = (i * 10 - late, (1_i64 << 32) | (i % 50), i / 100);
                format!(
                    r#"{{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":{tid},"ts":{ts},"dur":8,"args":{{"correlation":{replay},"graph node id":{node}}}}}"#
                )
            })
            .collect();
        let path = dir.join("trace.json");
        std::fs::write(&path, format!(r#"{{"traceEvents":[{}]}}"#, events.join(","))).unwrap();
        let (mut index, _) = crate::read::scan::scan(
            &path,
            &WriteKeys::new([]),
            2,
            &crate::CancelToken::new(),
            &mut |_, _| {},
        )
        .unwrap();
        index.events.iter_mut().for_each(Tracked::set_annotated);
        index
    }

    #[test]
    fn a_finder_stopped_and_taken_over_finds_what_one_run_does() {
        const MODULES: [&str; 5] = ["m.a.x", "m.a.y", "m.b", "m.b", "n"];
        let dir = tempfile::tempdir().unwrap();
        let index = skewed_trace(dir.path());
        let value_of = |node: NodeId| Some(MODULES[(node % 50 / 10) as usize]);
        let mut finder = SpanFinder::new(&index, value_of);
        assert!(finder.run(&AtomicBool::new(false)));
        let straight = finder.finish();
        let mut finder = SpanFinder::new(&index, value_of);
        let (stop, mut runs) = (AtomicBool::new(true), 1);
        while !finder.run(&stop) {
            runs += 1;
        }
        // a stop's worth at a time, over both walks (the skewed lane is walked again)
        assert_eq!(runs, 6);
        let stopped = finder.finish();
        assert!(straight.len() > 500, "{}", straight.len());
        assert_eq!(stopped, straight);
    }

    #[test]
    fn node_tables_grow_only_with_what_they_hold() {
        let mut chains = ChainOf::default();
        let sparse = |graph: NodeId| graph << 32 | 1_000_000;
        let (dense, backwards) = (|local: NodeId| 6 << 32 | local, |local: NodeId| 5 << 32 | local);
        for graph in 0..1000 {
            *chains.slot(sparse(graph)) = graph as u32;
        }
        for local in (0..5000).rev() {
            *chains.slot(backwards(local)) = local as u32;
        }
        for local in 0..5000 {
            *chains.slot(dense(local)) = local as u32 + 1;
        }
        *chains.slot(-3) = 9;
        let held: usize = chains.tables.iter().map(Vec::len).sum();
        assert_eq!(held, 5000 + 17, "the dense graph and the start of the backwards one");
        for local in 0..5000 {
            assert_eq!(*chains.slot(dense(local)), local as u32 + 1);
            // once its table reaches a node kept aside, the node is looked up anew
            assert!([local as u32, UNSEEN].contains(chains.slot(backwards(local))), "{local}");
        }
        assert!((0..1000).all(|graph| *chains.slot(sparse(graph)) == graph as u32));
        assert_eq!((*chains.slot(-3), *chains.slot(7 << 32)), (9, UNSEEN));
    }

    #[test]
    fn prefixes_are_dotted() {
        assert_eq!(prefixes("a.b.c").collect::<Vec<_>>(), ["a", "a.b", "a.b.c"]);
        assert_eq!(prefixes("layers.10").collect::<Vec<_>>(), ["layers", "layers.10"]);
        assert_eq!(prefixes("").count(), 0);
    }

    #[test]
    fn ticks_round_floats_to_nanoseconds() {
        assert_eq!(ticks(Num::Float(1.5)), Some(1_500));
        assert_eq!(ticks(Num::Float(-0.0015)), Some(-2));
        assert_eq!(ticks(Num::Float(5_361_804_756_551.771)), Some(5_361_804_756_551_771));
        for f in [1e20, -1e20, 9.3e15, -9.3e15, 8.9e15, 1e29] {
            assert_eq!(ticks(Num::Float(f)), Some((f * 1000.0).round() as i128), "{f}");
        }
        assert_eq!(ticks(Num::Float(f64::NAN)), None);
        assert_eq!(ticks(Num::Float(-0.0)), Some(0));
        assert_eq!(ticks(Num::Int(i64::MIN)), Some(i64::MIN as i128 * 1000));
    }

    #[test]
    fn the_inline_rounding_is_round() {
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let ties = (-40..40).map(|i| i as f64 + 0.5);
        let near_ties = [
            0.499_999_999_999_999_94,
            -0.499_999_999_999_999_94,
            2.5 - f64::EPSILON,
            4_503_599_627_370_495.5,
        ];
        let edges = [0.0, -0.0, 8.999e18, -8.999e18, 4_503_599_627_370_497.0, f64::MIN_POSITIVE];
        let random = (0..100_000).map(|_| {
            let bits = next();
            // magnitudes from 1e-3 to 1e18, both signs
            let x = 10f64.powf((bits >> 11) as f64 / (1u64 << 53) as f64 * 21.0 - 3.0);
            if bits & 1 == 1 {
                -x
            } else {
                x
            }
        });
        for x in ties.chain(near_ties).chain(edges).chain(random) {
            assert_eq!(round_to_i64(x), x.round() as i64, "{x:e}");
        }
    }
}
