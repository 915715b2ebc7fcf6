//! Node ids for traces whose profiler wrote none: each replay's events (one
//! `cudaGraphLaunch` correlation) are matched to a recorded graph by their kernels,
//! then to its nodes in dependency order.

use std::collections::BTreeSet;

use rustc_hash::FxHashMap as HashMap;

use crate::annotations::{Annotations, GraphNode, NodeKind};
use crate::index::keys::Num;
use crate::index::{Cat, Node, NodeId, ReplayMarker, Stamp, TraceIndex};
use crate::passes::names::NameKeys;
use crate::passes::sort_by_start;
use crate::report::Recovery;
use crate::Recover;

#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
enum Tier {
    Full,
    Base,
}

/// A node of a recorded graph, prepared for matching.
struct PlanNode {
    id: i64,
    full: u32,
    base: u32,
    grid_block: Option<[u32; 6]>,
    deps: usize,
    dependents: Vec<usize>,
}

struct Plan {
    nodes: Vec<PlanNode>,
    /// (name key, count) per tier.
    signature: [Vec<(u32, u32)>; 2],
    /// Every node's (name key, launch shape), sorted, per tier: what tells graphs with
    /// the same kernels apart (one graph per input shape, say).
    shapes: [Vec<Shaped>; 2],
}

type Shaped = (u32, Option<[u32; 6]>);

fn shapes(items: impl Iterator<Item = Shaped>) -> Vec<Shaped> {
    let mut all: Vec<Shaped> = items.collect();
    all.sort_unstable();
    all
}

fn kind_of(cat: Cat) -> Option<NodeKind> {
    match cat {
        Cat::Kernel => Some(NodeKind::Kernel),
        Cat::Memcpy => Some(NodeKind::Memcpy),
        Cat::Memset => Some(NodeKind::Memset),
        _ => None,
    }
}

fn signature(keys: impl Iterator<Item = u32>) -> Vec<(u32, u32)> {
    let mut counts: HashMap<u32, u32> = HashMap::default();
    for k in keys {
        *counts.entry(k).or_default() += 1;
    }
    let mut sig: Vec<(u32, u32)> = counts.into_iter().collect();
    sig.sort_unstable();
    sig
}

fn plan(nodes: &[GraphNode], names: &mut NameKeys) -> Plan {
    let local: HashMap<i64, usize> = nodes.iter().enumerate().map(|(i, n)| (n.id, i)).collect();
    let mut plan_nodes: Vec<PlanNode> = nodes
        .iter()
        .map(|n| {
            let (full, base) = names.keys(n.kind, n.name.as_deref());
            let grid_block = match (n.grid, n.block) {
                (Some([a, b, c]), Some([d, e, f])) => Some([a, b, c, d, e, f]),
                _ => None,
            };
            PlanNode { id: n.id, full, base, grid_block, deps: 0, dependents: Vec::new() }
        })
        .collect();
    for (i, n) in nodes.iter().enumerate() {
        let mut deps: Vec<usize> =
            n.deps.iter().filter_map(|d| local.get(d).copied()).filter(|&d| d != i).collect();
        deps.sort_unstable();
        deps.dedup();
        plan_nodes[i].deps = deps.len();
        for d in deps {
            plan_nodes[d].dependents.push(i);
        }
    }
    let signature =
        [signature(plan_nodes.iter().map(|n| n.full)), signature(plan_nodes.iter().map(|n| n.base))];
    let shaped = [
        shapes(plan_nodes.iter().map(|n| (n.full, n.grid_block))),
        shapes(plan_nodes.iter().map(|n| (n.base, n.grid_block))),
    ];
    Plan { nodes: plan_nodes, signature, shapes: shaped }
}

struct Event {
    index: usize,
    full: u32,
    base: u32,
    grid_block: Option<[u32; 6]>,
}

/// Assign each event of a replay (in start order) a node of `plan`.
fn assign(events: &[Event], plan: &Plan, tier: Tier, tied: &mut u64) -> Option<Vec<i64>> {
    let key = |full: u32, base: u32| if tier == Tier::Full { full } else { base };
    let mut waiting: Vec<usize> = plan.nodes.iter().map(|n| n.deps).collect();
    let mut eligible: HashMap<u32, BTreeSet<usize>> = HashMap::default();
    for (i, n) in plan.nodes.iter().enumerate() {
        if n.deps == 0 {
            eligible.entry(key(n.full, n.base)).or_default().insert(i);
        }
    }
    let mut out = Vec::with_capacity(events.len());
    for ev in events {
        let candidates = eligible.get(&key(ev.full, ev.base))?;
        // The launch shape, then the lowest local id; never the lane: CUDA runs the
        // branches of a graph on hardware streams of its own choosing.
        let other_shape =
            |&node: &usize| ev.grid_block.is_none() || plan.nodes[node].grid_block != ev.grid_block;
        let best = candidates.iter().min_by_key(|&c| (other_shape(c), *c)).copied()?;
        if candidates.iter().filter(|&c| other_shape(c) == other_shape(&best)).count() > 1 {
            *tied += 1;
        }
        eligible.get_mut(&key(ev.full, ev.base)).expect("present").remove(&best);
        out.push(plan.nodes[best].id);
        for &d in &plan.nodes[best].dependents {
            waiting[d] -= 1;
            if waiting[d] == 0 {
                let dn = &plan.nodes[d];
                eligible.entry(key(dn.full, dn.base)).or_default().insert(d);
            }
        }
    }
    Some(out)
}

/// A replay's events in start order (then input order).
fn by_start(index: &TraceIndex, members: Vec<usize>) -> Vec<usize> {
    let mut starts: Vec<(Num, usize)> =
        members.into_iter().map(|i| (index.events[i].ts().expect("not odd"), i)).collect();
    sort_by_start(&mut starts, |s| s.0, |s| s.1);
    starts.into_iter().map(|(_, i)| i).collect()
}

/// Which recorded graphs have a replay's kernels (names and counts): the exact names
/// first, else their base names.
#[derive(Clone)]
enum Fit {
    One(usize, Tier),
    /// Several graphs have those kernels: their launch shapes decide.
    Several(Vec<usize>, Tier),
    None,
}

fn fit_by_kernels(plans: &[Plan], sig: &[Vec<(u32, u32)>; 2]) -> Fit {
    for tier in [Tier::Full, Tier::Base] {
        let slot = tier as usize;
        let fits: Vec<usize> = (0..plans.len()).filter(|&g| plans[g].signature[slot] == sig[slot]).collect();
        match fits.len() {
            0 => continue,
            1 => return Fit::One(fits[0], tier),
            _ => return Fit::Several(fits, tier),
        }
    }
    Fit::None
}

/// Per launch correlation in `wanted`, the graph named by the innermost stamp that
/// encloses the launch's start on its thread.
fn stamped_graphs(index: &TraceIndex, wanted: &HashMap<i64, Vec<usize>>) -> HashMap<i64, u32> {
    let mut out = HashMap::default();
    if index.stamps.is_empty() {
        return out;
    }
    let mut by_thread: HashMap<(u32, u32), Vec<Stamp>> = HashMap::default();
    for s in &index.stamps {
        by_thread.entry((s.pid, s.tid)).or_default().push(*s);
    }
    // Start order, an enclosing range before those it encloses; with each the latest
    // end so far, which stops the search backwards.
    let threads: HashMap<(u32, u32), (Vec<Stamp>, Vec<f64>)> = by_thread
        .into_iter()
        .map(|(thread, mut stamps)| {
            stamps.sort_by(|a, b| a.start.total_cmp(&b.start).then(b.end.total_cmp(&a.end)));
            let reach = stamps.iter().scan(f64::NEG_INFINITY, |m, s| {
                *m = m.max(s.end);
                Some(*m)
            });
            let reach = reach.collect();
            (thread, (stamps, reach))
        })
        .collect();
    for launch in &index.launches {
        if !wanted.contains_key(&launch.correlation) {
            continue;
        }
        let Some((stamps, reach)) = threads.get(&(launch.pid, launch.tid)) else { continue };
        let mut j = stamps.partition_point(|s| s.start <= launch.ts);
        while j > 0 && reach[j - 1] >= launch.ts {
            j -= 1;
            if stamps[j].end >= launch.ts {
                out.insert(launch.correlation, stamps[j].graph);
                break;
            }
        }
    }
    out
}

/// A replay's node ids, and how many of them the lowest-id rule chose.
type Assigned = (Vec<i64>, u64);

/// The tier at which `plan` has exactly the replay's kernels.
fn tier_of(plan: &Plan, sig: &[Vec<(u32, u32)>; 2]) -> Option<Tier> {
    [Tier::Full, Tier::Base].into_iter().find(|&t| plan.signature[t as usize] == sig[t as usize])
}

/// Among `candidates` (ascending), the ids of the lowest that takes the replay, if every
/// candidate that takes it gives each event the same annotation.
fn equivalent(
    events: &[Event],
    plans: &[Plan],
    candidates: &[usize],
    tier: Tier,
    annotations: &Annotations,
) -> Option<Assigned> {
    let mut first: Option<Assigned> = None;
    for &g in candidates {
        let mut tied = 0;
        let Some(ids) = assign(events, &plans[g], tier, &mut tied) else { continue };
        match &first {
            None => first = Some((ids, tied)),
            Some((chosen, _)) => {
                let same = chosen.iter().zip(&ids).all(|(a, b)| {
                    annotations.nodes.get(&(*a as NodeId)) == annotations.nodes.get(&(*b as NodeId))
                });
                if !same {
                    return None;
                }
            }
        }
    }
    first
}

/// Recover node ids in `index` from the topology in `annotations`.
#[cfg(test)]
pub(crate) fn recover(index: &mut TraceIndex, annotations: &Annotations, mode: Recover) -> Recovery {
    recover_with(index, annotations, mode, true)
}

/// [`recover`]; `exact` reads replay stamps and annotates equivalent replays (without
/// it, matching is by topology alone, as before stamps).
pub(crate) fn recover_with(
    index: &mut TraceIndex,
    annotations: &Annotations,
    mode: Recover,
    exact: bool,
) -> Recovery {
    let mut report = Recovery { exact, ..Recovery::default() };
    if mode == Recover::Never {
        return report;
    }
    if exact {
        report.malformed_stamps = index.malformed_stamps;
    }
    let mut replays = replays_needing_ids(index, mode);
    report.replays = replays.len() as u64;
    if replays.is_empty() {
        return report;
    }
    if annotations.graphs.is_empty() {
        report.no_topology = true;
        report.unmatched_replays = report.replays;
        report.unmatched_events = replays.values().map(|r| r.len() as u64).sum();
        return report;
    }
    let mut matcher = Matcher::new(annotations, exact);
    let stamped = if exact { stamped_graphs(index, &replays) } else { HashMap::default() };
    let mut correlations: Vec<i64> = replays.keys().copied().collect();
    correlations.sort_unstable();
    for c in correlations {
        let members = replays.remove(&c).expect("listed");
        let events = matcher.events(index, members);
        match matcher.decide(&events, stamped.get(&c).copied(), &mut report) {
            Ok(assigned) => set_recovered(index, &events, assigned, &mut report),
            Err(why) => leave_alone(index, &events, why, exact, &mut report),
        }
    }
    report
}

/// The graph-launched work events of each replay (by correlation) that needs ids: with
/// `Recover::Auto`, the replays none of whose events has a `graph node id`; none at all
/// when every event has one.
fn replays_needing_ids(index: &TraceIndex, mode: Recover) -> HashMap<i64, Vec<usize>> {
    let candidate = |e: &crate::index::Tracked| {
        !e.odd()
            && kind_of(e.cat).is_some()
            && e.correlation().is_some_and(|c| index.graph_launches.contains(&c))
    };
    let mut replays: HashMap<i64, Vec<usize>> = HashMap::default();
    if mode == Recover::Auto && !index.events.iter().any(|e| e.node() == Node::Missing && candidate(e)) {
        return replays;
    }
    let mut has_id: rustc_hash::FxHashSet<i64> = rustc_hash::FxHashSet::default();
    for (i, e) in index.events.iter().enumerate() {
        if !candidate(e) {
            continue;
        }
        let c = e.correlation().expect("candidates have one");
        replays.entry(c).or_default().push(i);
        if e.node() != Node::Missing {
            has_id.insert(c);
        }
    }
    if mode == Recover::Auto {
        replays.retain(|c, _| !has_id.contains(c));
    }
    replays
}

/// The recorded graphs, prepared for matching replays to them.
struct Matcher<'a> {
    annotations: &'a Annotations,
    /// Whether equivalent replays are annotated (not by topology alone).
    exact: bool,
    names: NameKeys,
    plans: Vec<Plan>,
    /// Executable graph id -> its plan.
    plan_of: HashMap<u32, usize>,
    memo: Memo,
}

/// What matching has decided, by what decided it: replays alike (most are) are decided
/// once.
#[derive(Default)]
struct Memo {
    /// A trace name (with its kind) -> its name keys.
    name_keys: HashMap<(u32, u8), (u32, u32)>,
    /// A replay's kernels (names and counts, per tier) -> the graphs that have them.
    fits: HashMap<[Vec<(u32, u32)>; 2], Fit>,
    /// A replay's kernels with their launch shapes -> the graphs among those fits that
    /// have them too.
    by_shape: HashMap<Vec<Shaped>, Vec<usize>>,
    /// A replay that several graphs take -> the ids of the lowest, if all annotate alike.
    equivalent: HashMap<(Tier, Vec<Shaped>), Option<Assigned>>,
}

impl<'a> Matcher<'a> {
    fn new(annotations: &'a Annotations, exact: bool) -> Matcher<'a> {
        let mut names = NameKeys::default();
        let plans: Vec<Plan> = annotations.graphs.values().map(|g| plan(g, &mut names)).collect();
        let plan_of = annotations.graphs.keys().enumerate().map(|(i, g)| (*g, i)).collect();
        Matcher { annotations, exact, names, plans, plan_of, memo: Memo::default() }
    }

    /// A replay's events, in start order, with the keys they match by.
    fn events(&mut self, index: &TraceIndex, members: Vec<usize>) -> Vec<Event> {
        by_start(index, members)
            .into_iter()
            .map(|i| {
                let e = &index.events[i];
                let kind = kind_of(e.cat).expect("work");
                let names = &mut self.names;
                let (full, base) = *self.memo.name_keys.entry((e.name, kind.code())).or_insert_with(|| {
                    let name = if e.name == u32::MAX { "" } else { index.names.get(e.name) };
                    names.keys(kind, Some(name))
                });
                Event { index: i, full, base, grid_block: index.shape_of(e) }
            })
            .collect()
    }

    /// The node ids of a replay's events, or why it has none: the graph its stamp names
    /// where that graph takes it, else the one graph that has its kernels (told apart
    /// by their launch shapes where several have them), or the lowest of several that
    /// annotate it alike.
    fn decide(
        &mut self,
        events: &[Event],
        stamp: Option<u32>,
        report: &mut Recovery,
    ) -> Result<(Vec<i64>, Tier), ReplayMarker> {
        let sig = [signature(events.iter().map(|e| e.full)), signature(events.iter().map(|e| e.base))];
        if let Some(graph) = stamp {
            match self.plan_of.get(&graph) {
                None => report.unknown_stamps += 1,
                Some(&g) => {
                    let plan = &self.plans[g];
                    let mut tied = 0;
                    match tier_of(plan, &sig)
                        .and_then(|tier| assign(events, plan, tier, &mut tied).map(|ids| (ids, tier)))
                    {
                        Some(assigned) => {
                            report.stamped_replays += 1;
                            report.tied_events += tied;
                            return Ok(assigned);
                        }
                        None => report.unfit_stamps += 1,
                    }
                }
            }
        }
        let plans = &self.plans;
        let fit = self.memo.fits.entry(sig.clone()).or_insert_with(|| fit_by_kernels(plans, &sig)).clone();
        let (graph, tier) = match fit {
            Fit::One(graph, tier) => (graph, tier),
            Fit::Several(graphs, tier) => {
                let slot = tier as usize;
                let key = |e: &Event| (if tier == Tier::Full { e.full } else { e.base }, e.grid_block);
                let seen = shapes(events.iter().map(key));
                let same = self.memo.by_shape.entry(seen).or_insert_with_key(|seen| {
                    graphs.iter().copied().filter(|&g| plans[g].shapes[slot] == *seen).collect()
                });
                if same.len() != 1 {
                    if !self.exact {
                        return Err(ReplayMarker::Ambiguous);
                    }
                    let candidates = if same.is_empty() { &graphs } else { &*same };
                    let annotations = self.annotations;
                    let found = self
                        .memo
                        .equivalent
                        .entry((tier, events.iter().map(key).collect()))
                        .or_insert_with(|| equivalent(events, plans, candidates, tier, annotations))
                        .clone();
                    let (ids, tied) = found.ok_or(ReplayMarker::Ambiguous)?;
                    report.equivalent_replays += 1;
                    report.tied_events += tied;
                    return Ok((ids, tier));
                }
                (same[0], tier)
            }
            Fit::None => return Err(ReplayMarker::Unmatched),
        };
        let ids =
            assign(events, &plans[graph], tier, &mut report.tied_events).ok_or(ReplayMarker::Unmatched)?;
        Ok((ids, tier))
    }
}

/// Count a replay left without node ids (`why`: ambiguous or unmatched) and, unless
/// recovering by topology alone, say why in the output (`cgfast summary` counts them).
fn leave_alone(
    index: &mut TraceIndex,
    events: &[Event],
    why: ReplayMarker,
    exact: bool,
    report: &mut Recovery,
) {
    let n = events.len() as u64;
    match why {
        ReplayMarker::Ambiguous => {
            report.ambiguous_replays += 1;
            report.ambiguous_events += n;
        }
        ReplayMarker::Unmatched => {
            report.unmatched_replays += 1;
            report.unmatched_events += n;
        }
        ReplayMarker::None => unreachable!("a replay left alone has a reason"),
    }
    if exact {
        for e in events {
            index.events[e.index].set_replay_marker(why);
        }
    }
}

fn set_recovered(
    index: &mut TraceIndex,
    events: &[Event],
    (ids, tier): (Vec<i64>, Tier),
    report: &mut Recovery,
) {
    report.recovered_replays += 1;
    if tier == Tier::Base {
        report.base_name_replays += 1;
    }
    report.recovered_events += ids.len() as u64;
    for (ev, id) in events.iter().zip(ids) {
        index.events[ev.index].set_recovered(id as NodeId);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A replay: its correlation and its (kernel, lane, grid) in start order.
    type TestReplay<'a> = (i64, &'a [(&'a str, u32, u32)]);

    /// A trace of replays (correlation, [(kernel, lane, grid)] in start order), each
    /// launched by a `cudaGraphLaunch`, with no `graph node id`.
    fn trace_of(replays: &[TestReplay]) -> TraceIndex {
        trace_with(replays, &[], "")
    }

    /// [`trace_of`], the k-th replay's launch at ts 1000 k + 500 on thread 1 of pid 1,
    /// with CPU ranges (tid, start, dur, name) and `node_ids` (say `, "graph node id": 9`)
    /// in every kernel's args.
    fn trace_with(replays: &[TestReplay], ranges: &[(u32, u32, u32, &str)], node_ids: &str) -> TraceIndex {
        let mut events = Vec::new();
        for (tid, start, dur, name) in ranges {
            events.push(format!(r#"{{"ph": "X", "cat": "user_annotation", "name": "{name}", "pid": 1, "tid": {tid}, "ts": {start}, "dur": {dur}, "args": {{}}}}"#));
        }
        for (k, (correlation, kernels)) in replays.iter().enumerate() {
            let mut ts = 1000 * k + 500;
            events.push(format!(r#"{{"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 1, "tid": 1, "ts": {ts}, "dur": 1, "args": {{"correlation": {correlation}}}}}"#));
            for (name, lane, grid) in kernels.iter() {
                ts += 10;
                events.push(format!(r#"{{"ph": "X", "cat": "kernel", "name": "{name}", "pid": 0, "tid": {lane}, "ts": {ts}, "dur": 5, "args": {{"correlation": {correlation}, "grid": [{grid}, 1, 1], "block": [128, 1, 1]{node_ids}}}}}"#));
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.json");
        std::fs::write(&path, format!(r#"{{"traceEvents": [{}]}}"#, events.join(",\n"))).unwrap();
        let no_keys = crate::read::scan::WriteKeys::default();
        crate::read::scan::scan(&path, &no_keys, 2, &crate::CancelToken::new(), &mut |_, _| {}).unwrap().0
    }

    /// A graph's kernel nodes: (name, grid, dependencies as local ids).
    fn graph(exec: u32, nodes: &[(&str, u32, &[i64])]) -> (u32, Vec<GraphNode>) {
        let high = (exec as i64) << 32;
        let nodes = nodes
            .iter()
            .enumerate()
            .map(|(i, (name, grid, deps))| GraphNode {
                id: high | i as i64,
                kind: NodeKind::Kernel,
                name: Some(name.to_string()),
                deps: deps.iter().map(|d| high | d).collect(),
                grid: Some([*grid, 1, 1]),
                block: Some([128, 1, 1]),
            })
            .collect();
        (exec, nodes)
    }

    fn recovered(graphs: Vec<(u32, Vec<GraphNode>)>, replays: &[TestReplay]) -> (Vec<Option<i64>>, Recovery) {
        recovered_in(trace_of(replays), graphs, &[], Recover::Auto)
    }

    /// Recover `index` with `graphs`, each node of graph g annotated `labels[g][local]`.
    fn recovered_in(
        mut index: TraceIndex,
        graphs: Vec<(u32, Vec<GraphNode>)>,
        labels: &[(u32, &[&str])],
        mode: Recover,
    ) -> (Vec<Option<i64>>, Recovery) {
        let mut nodes: HashMap<NodeId, Vec<crate::annotations::Item>> = HashMap::default();
        for (graph, names) in labels {
            for (local, label) in names.iter().enumerate() {
                let item =
                    crate::annotations::Item::Other(crate::annotations::value::Value::Str(label.to_string()));
                nodes.insert(((*graph as NodeId) << 32) | local as NodeId, vec![item]);
            }
        }
        let annotations = Annotations { nodes, graphs: graphs.into_iter().collect(), ..Default::default() };
        let report = recover(&mut index, &annotations, mode);
        let ids = index
            .events
            .iter()
            .filter(|e| e.cat == Cat::Kernel)
            .map(|e| match e.current_node() {
                Node::Id(n) => Some(n as i64),
                _ => None,
            })
            .collect();
        (ids, report)
    }

    #[test]
    fn ties_go_to_the_lowest_local_id_whatever_the_lane() {
        // a(0) and c(1) are roots; x(2) follows c and x(3) follows a. The first x runs on
        // a's lane, but the lane decides nothing.
        let g = graph(2, &[("a", 1, &[]), ("c", 1, &[]), ("x", 1, &[1]), ("x", 1, &[0])]);
        let (ids, report) = recovered(vec![g], &[(5, &[("a", 7, 1), ("c", 9, 1), ("x", 7, 1), ("x", 9, 1)])]);
        let high = 2i64 << 32;
        assert_eq!(ids, vec![Some(high), Some(high | 1), Some(high | 2), Some(high | 3)]);
        assert_eq!((report.recovered_replays, report.recovered_events, report.tied_events), (1, 4, 1));
    }

    #[test]
    fn the_launch_shape_picks_among_same_named_candidates() {
        let g = graph(2, &[("x", 4, &[]), ("x", 8, &[])]);
        let (ids, report) = recovered(vec![g], &[(5, &[("x", 7, 8), ("x", 7, 4)])]);
        let high = 2i64 << 32;
        assert_eq!(ids, vec![Some(high | 1), Some(high)]);
        assert_eq!(report.tied_events, 0);
    }

    #[test]
    fn graphs_with_the_same_kernels_are_told_apart_by_their_shapes() {
        let small = graph(2, &[("k", 4, &[]), ("m", 4, &[0])]);
        let large = graph(4, &[("k", 64, &[]), ("m", 64, &[0])]);
        let (ids, report) = recovered(
            vec![small, large],
            &[(5, &[("k", 7, 64), ("m", 7, 64)]), (6, &[("k", 7, 4), ("m", 7, 4)])],
        );
        let (s, l) = (2i64 << 32, 4i64 << 32);
        assert_eq!(ids, vec![Some(l), Some(l | 1), Some(s), Some(s | 1)]);
        assert_eq!((report.replays, report.recovered_replays, report.ambiguous_replays), (2, 2, 0));
    }

    #[test]
    fn ambiguous_and_unmatched_replays_are_counted_and_left_alone() {
        let twin_a = graph(2, &[("k", 4, &[])]);
        let twin_b = graph(4, &[("k", 4, &[])]);
        let other = graph(6, &[("z", 4, &[]), ("z", 4, &[0])]);
        let replays: &[TestReplay] =
            &[(5, &[("k", 7, 4)]), (6, &[("q", 7, 4), ("q", 7, 4)]), (7, &[("z", 7, 4), ("z", 7, 4)])];
        let labels: &[(u32, &[&str])] = &[(2, &["a"]), (4, &["b"])];
        let (ids, report) =
            recovered_in(trace_of(replays), vec![twin_a, twin_b, other], labels, Recover::Auto);
        let z = 6i64 << 32;
        assert_eq!(ids, vec![None, None, None, Some(z), Some(z | 1)]);
        let counts = (
            report.replays,
            report.recovered_replays,
            report.ambiguous_replays,
            report.ambiguous_events,
            report.unmatched_replays,
            report.unmatched_events,
            report.unresolved_events(),
        );
        assert_eq!(counts, (3, 1, 1, 1, 1, 2, 3));
    }

    /// Two graphs of the same kernels and shapes (ids 2 and 4) and a third with others.
    #[test]
    fn events_left_alone_are_marked_with_why_unless_by_topology_only() {
        let twin_a = graph(2, &[("k", 4, &[])]);
        let twin_b = graph(4, &[("k", 4, &[])]);
        let other = graph(6, &[("z", 4, &[]), ("z", 4, &[0])]);
        let replays: &[TestReplay] =
            &[(5, &[("k", 7, 4)]), (6, &[("q", 7, 4), ("q", 7, 4)]), (7, &[("z", 7, 4), ("z", 7, 4)])];
        let mut nodes: HashMap<NodeId, Vec<crate::annotations::Item>> = HashMap::default();
        for (graph, label) in [(2, "a"), (4, "b")] {
            nodes.insert(
                (graph as NodeId) << 32,
                vec![crate::annotations::Item::Other(crate::annotations::value::Value::Str(label.into()))],
            );
        }
        let annotations = Annotations {
            nodes,
            graphs: vec![twin_a, twin_b, other].into_iter().collect(),
            ..Default::default()
        };
        let kernels = |index: &TraceIndex| {
            index
                .events
                .iter()
                .filter(|e| e.cat == Cat::Kernel)
                .map(|e| (e.replay_marker(), e.replay_marker_change()))
                .collect::<Vec<_>>()
        };
        let mut index = trace_of(replays);
        recover_with(&mut index, &annotations, Recover::Auto, true);
        let (a, u, n) = (ReplayMarker::Ambiguous, ReplayMarker::Unmatched, ReplayMarker::None);
        assert_eq!(kernels(&index), vec![(a, Some(a)), (u, Some(u)), (u, Some(u)), (n, None), (n, None)]);
        // by topology alone: nothing marked, the output as before stamps
        let mut index = trace_of(replays);
        recover_with(&mut index, &annotations, Recover::Auto, false);
        assert!(kernels(&index).iter().all(|&m| m == (n, None)));
        // a marker an earlier run wrote goes once the replay is recovered
        let mut index = trace_of(replays);
        let last = index.events.iter().rposition(|e| e.cat == Cat::Kernel).unwrap();
        index.events[last].set_replay_marker(a);
        recover_with(&mut index, &annotations, Recover::Auto, false);
        assert_eq!(index.events[last].replay_marker(), n);
    }

    fn twins() -> Vec<(u32, Vec<GraphNode>)> {
        vec![
            graph(2, &[("k", 4, &[]), ("m", 4, &[0])]),
            graph(4, &[("k", 4, &[]), ("m", 4, &[0])]),
            graph(6, &[("z", 4, &[])]),
        ]
    }

    const TWIN: &[(&str, u32, u32)] = &[("k", 7, 4), ("m", 7, 4)];
    const G2: i64 = 2 << 32;
    const G4: i64 = 4 << 32;

    #[test]
    fn unstamped_twins_with_equal_annotations_take_the_lowest_graph() {
        let labels: &[(u32, &[&str])] = &[(2, &["attn", "mlp"]), (4, &["attn", "mlp"])];
        let (ids, report) = recovered_in(trace_of(&[(5, TWIN), (6, TWIN)]), twins(), labels, Recover::Auto);
        assert_eq!(ids, vec![Some(G2), Some(G2 | 1), Some(G2), Some(G2 | 1)]);
        assert_eq!(
            (
                report.recovered_replays,
                report.equivalent_replays,
                report.ambiguous_replays,
                report.stamped_replays
            ),
            (2, 2, 0, 0)
        );
    }

    #[test]
    fn unstamped_twins_with_differing_annotations_are_left_alone() {
        let labels: &[(u32, &[&str])] = &[(2, &["attn", "mlp"]), (4, &["attn", "other"])];
        let (ids, report) = recovered_in(trace_of(&[(5, TWIN)]), twins(), labels, Recover::Auto);
        assert_eq!(ids, vec![None, None]);
        assert_eq!(
            (
                report.recovered_replays,
                report.equivalent_replays,
                report.ambiguous_replays,
                report.ambiguous_events
            ),
            (0, 0, 1, 2)
        );
        // one annotated and one not differ too
        let labels: &[(u32, &[&str])] = &[(2, &["attn", "mlp"])];
        let (_, report) = recovered_in(trace_of(&[(5, TWIN)]), twins(), labels, Recover::Auto);
        assert_eq!(report.ambiguous_replays, 1);
    }

    #[test]
    fn stamps_name_the_graph_of_each_replay() {
        let labels: &[(u32, &[&str])] = &[(2, &["attn", "mlp"]), (4, &["attn", "other"])];
        let stamps = [
            (1, 400, 200, "cgfast.replay 4"),
            (1, 1400, 200, "cgfast.replay 2"),
            (1, 2400, 200, "cgfast.replay 4"),
        ];
        let index = trace_with(&[(5, TWIN), (6, TWIN), (7, TWIN)], &stamps, "");
        let (ids, report) = recovered_in(index, twins(), labels, Recover::Auto);
        assert_eq!(ids, vec![Some(G4), Some(G4 | 1), Some(G2), Some(G2 | 1), Some(G4), Some(G4 | 1)]);
        assert_eq!(
            (
                report.recovered_replays,
                report.stamped_replays,
                report.ambiguous_replays,
                report.equivalent_replays
            ),
            (3, 3, 0, 0)
        );
        // without stamps reading, as before
        let index = trace_with(&[(5, TWIN), (6, TWIN), (7, TWIN)], &stamps, "");
        let annotations = Annotations {
            nodes: Default::default(),
            graphs: twins().into_iter().collect(),
            ..Default::default()
        };
        let mut plain = index;
        let report = recover_with(&mut plain, &annotations, Recover::Auto, false);
        assert_eq!((report.recovered_replays, report.ambiguous_replays, report.stamped_replays), (0, 3, 0));
    }

    #[test]
    fn the_innermost_enclosing_stamp_decides() {
        let labels: &[(u32, &[&str])] = &[(2, &["a", "b"]), (4, &["c", "d"])];
        // replay 0 (launch at 500) sits in an outer stamp (naming 2) and an inner one
        // (naming 4) opened inside a plain range; replay 1 (at 1500) is in the outer
        // stamp only, after the inner one ended
        let ranges = [
            (1, 0, 3000, "cgfast.replay 2"),
            (1, 300, 400, "forward"),
            (1, 450, 100, "cgfast.replay 4"),
            (1, 460, 80, "aten::mm"),
        ];
        let (ids, report) =
            recovered_in(trace_with(&[(5, TWIN), (6, TWIN)], &ranges, ""), twins(), labels, Recover::Auto);
        assert_eq!(ids, vec![Some(G4), Some(G4 | 1), Some(G2), Some(G2 | 1)]);
        assert_eq!(report.stamped_replays, 2);
    }

    #[test]
    fn stamps_on_another_thread_are_not_read() {
        let labels: &[(u32, &[&str])] = &[(2, &["a", "b"]), (4, &["c", "d"])];
        let (ids, report) = recovered_in(
            trace_with(&[(5, TWIN)], &[(2, 400, 200, "cgfast.replay 4")], ""),
            twins(),
            labels,
            Recover::Auto,
        );
        assert_eq!(ids, vec![None, None]);
        assert_eq!((report.stamped_replays, report.ambiguous_replays), (0, 1));
    }

    #[test]
    fn unknown_and_unfit_stamps_are_reported_not_trusted() {
        let labels: &[(u32, &[&str])] = &[(2, &["a", "b"]), (4, &["a", "b"])];
        // 9 is no recorded graph; 6 has other kernels: both replays then match as unstamped
        let ranges = [(1, 400, 200, "cgfast.replay 9"), (1, 1400, 200, "cgfast.replay 6")];
        let (ids, report) =
            recovered_in(trace_with(&[(5, TWIN), (6, TWIN)], &ranges, ""), twins(), labels, Recover::Auto);
        assert_eq!(ids, vec![Some(G2), Some(G2 | 1), Some(G2), Some(G2 | 1)]);
        assert_eq!(
            (report.unknown_stamps, report.unfit_stamps, report.stamped_replays, report.equivalent_replays),
            (1, 1, 0, 2)
        );
    }

    #[test]
    fn malformed_stamps_are_counted_and_ignored() {
        let labels: &[(u32, &[&str])] = &[(2, &["a", "b"]), (4, &["c", "d"])];
        let ranges = [
            (1, 400, 200, "cgfast.replay x"),
            (1, 410, 100, "cgfast.replay"),
            (1, 420, 50, "cgfast.replay 4 "),
            (1, 1400, 200, "cgfast.replay 4"),
        ];
        let (ids, report) =
            recovered_in(trace_with(&[(5, TWIN), (6, TWIN)], &ranges, ""), twins(), labels, Recover::Auto);
        assert_eq!(ids, vec![None, None, Some(G4), Some(G4 | 1)]);
        assert_eq!((report.malformed_stamps, report.stamped_replays, report.ambiguous_replays), (3, 1, 1));
    }

    #[test]
    fn stamps_change_nothing_where_the_trace_has_node_ids() {
        let labels: &[(u32, &[&str])] = &[(2, &["a", "b"]), (4, &["c", "d"])];
        let index =
            trace_with(&[(5, TWIN)], &[(1, 400, 200, "cgfast.replay 4")], r#", "graph node id": 8589934593"#);
        let (ids, report) = recovered_in(index, twins(), labels, Recover::Auto);
        assert_eq!(ids, vec![Some(G2 | 1), Some(G2 | 1)]);
        assert_eq!(report, Recovery { exact: true, ..Recovery::default() });
    }

    #[test]
    fn replays_met_by_base_names_only_are_counted() {
        let g = graph(2, &[("_Z1fIiEvi", 4, &[])]);
        let (ids, report) = recovered(vec![g.clone()], &[(5, &[("void f<int>(int)", 7, 4)])]);
        assert_eq!((ids, report.base_name_replays), (vec![Some(2i64 << 32)], 0));
        let (ids, report) = recovered(vec![g], &[(5, &[("void f<float>(float)", 7, 4)])]);
        assert_eq!((ids, report.base_name_replays), (vec![Some(2i64 << 32)], 1));
    }
}
