//! Node ids for traces whose profiler wrote none: each replay's events (one
//! `cudaGraphLaunch` correlation) are matched to a recorded graph by their kernels,
//! then to its nodes in dependency order.

use std::collections::BTreeSet;

use rustc_hash::FxHashMap as HashMap;

use crate::annotations::{Annotations, GraphNode, NodeKind};
use crate::key::Num;
use crate::passes::sort_by_start;
use crate::trace::{Cat, Node, TraceIndex};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recover {
    /// Recover the replays whose events carry no `graph node id`.
    Auto,
    /// Recompute the ids of every replay, present or not.
    Always,
    Never,
}

/// What recovery did, for the run's summary.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Replays that needed ids.
    pub replays: u64,
    pub recovered_replays: u64,
    /// Replays that several recorded graphs fit equally well.
    pub ambiguous_replays: u64,
    /// Replays that no recorded graph fits.
    pub unmatched_replays: u64,
    pub recovered_events: u64,
    /// Events of ambiguous replays, left without an id.
    pub ambiguous_events: u64,
    /// Events of unmatched replays, left without an id.
    pub unmatched_events: u64,
    /// Ambiguous and unmatched events together.
    pub unresolved_events: u64,
    /// Events whose node was the lowest local id among several eligible candidates of
    /// the same kind, name and launch shape.
    pub tied_events: u64,
    /// Replays needed ids but the annotations hold no graph topology.
    pub no_topology: bool,
}

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

/// Names reduced to what both the driver's (mangled) and the profiler's (demangled)
/// spellings agree on.
#[derive(Default)]
struct NameKeys {
    ids: HashMap<String, u32>,
}

impl NameKeys {
    fn id(&mut self, text: String) -> u32 {
        let next = self.ids.len() as u32;
        *self.ids.entry(text).or_insert(next)
    }

    /// (full, base) keys of a kernel name, mangled or not; memcpy/memset by kind.
    fn keys(&mut self, kind: NodeKind, name: Option<&str>) -> (u32, u32) {
        let name = match kind {
            NodeKind::Kernel => name.unwrap_or(""),
            NodeKind::Memcpy => "<memcpy>",
            NodeKind::Memset => "<memset>",
        };
        let readable = demangle(name);
        (self.id(canonical(&readable)), self.id(format!("base:{}", base_name(&readable))))
    }
}

/// A mangled name demangled without return types (cpp_demangle prints nested ones
/// that the profiler's demangler leaves out); other names as they are.
fn demangle(name: &str) -> String {
    if !name.starts_with("_Z") {
        return name.to_string();
    }
    let options = cpp_demangle::DemangleOptions::new().no_return_type();
    cpp_demangle::Symbol::new(name)
        .ok()
        .and_then(|s| s.demangle_with_options(&options).ok())
        .unwrap_or_else(|| name.to_string())
}

/// What the profiler's and cpp_demangle's spellings of one kernel have in common: no
/// leading return type, no white space, and no `const` or `&` (which the two demanglers
/// place differently on lambda types).
fn canonical(readable: &str) -> String {
    let body = readable.trim_start().strip_prefix("void ").unwrap_or(readable.trim_start());
    let mut out = String::with_capacity(body.len());
    let mut rest = body;
    while let Some(at) = rest.find("const") {
        let (before, after) = rest.split_at(at);
        let word_start = before.chars().next_back().is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
        let word_end = after[5..].chars().next().is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
        out.push_str(before);
        if !(word_start && word_end) {
            out.push_str("const");
        }
        rest = &after[5..];
    }
    out.push_str(rest);
    out.retain(|c| !c.is_whitespace() && c != '&');
    out
}

/// `void ns::kernel<T>(args)` -> `ns::kernel`.
fn base_name(readable: &str) -> String {
    const ANONYMOUS: &str = "(anonymous namespace)";
    let mut from = 0;
    let end = loop {
        match readable[from..].find(['<', '(']) {
            None => break readable.len(),
            Some(k) if readable[from + k..].starts_with(ANONYMOUS) => from += k + ANONYMOUS.len(),
            Some(k) => break from + k,
        }
    };
    let head = &readable[..end];
    // The return type ends at the last space outside parentheses.
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in head.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ' ' if depth == 0 => start = i + 1,
            _ => {}
        }
    }
    head[start..].to_string()
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
        let mut deps: Vec<usize> = n.deps.iter().filter_map(|d| local.get(d).copied()).filter(|&d| d != i).collect();
        deps.sort_unstable();
        deps.dedup();
        plan_nodes[i].deps = deps.len();
        for d in deps {
            plan_nodes[d].dependents.push(i);
        }
    }
    let signature = [signature(plan_nodes.iter().map(|n| n.full)), signature(plan_nodes.iter().map(|n| n.base))];
    let shaped = [shapes(plan_nodes.iter().map(|n| (n.full, n.grid_block))), shapes(plan_nodes.iter().map(|n| (n.base, n.grid_block)))];
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
        let other_shape = |&node: &usize| ev.grid_block.is_none() || plan.nodes[node].grid_block != ev.grid_block;
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
    let mut starts: Vec<(Num, usize)> = members.into_iter().map(|i| (index.events[i].ts().expect("not odd"), i)).collect();
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

/// Recover node ids in `index` from the topology in `annotations`.
pub fn recover(index: &mut TraceIndex, annotations: &Annotations, mode: Recover) -> Recovery {
    let mut report = Recovery::default();
    if mode == Recover::Never {
        return report;
    }
    let candidate = |e: &crate::trace::Tracked| !e.odd() && kind_of(e.cat).is_some() && e.correlation().is_some_and(|c| index.graph_launches.contains(&c));
    if mode == Recover::Auto && !index.events.iter().any(|e| e.node() == Node::Missing && candidate(e)) {
        return report;
    }
    let mut replays: HashMap<i64, Vec<usize>> = HashMap::default();
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
    report.replays = replays.len() as u64;
    if replays.is_empty() {
        return report;
    }
    if annotations.graphs.is_empty() {
        report.no_topology = true;
        report.unmatched_replays = report.replays;
        report.unmatched_events = replays.values().map(|r| r.len() as u64).sum();
        report.unresolved_events = report.unmatched_events;
        return report;
    }

    let mut names = NameKeys::default();
    let plans: Vec<Plan> = annotations.graphs.values().map(|g| plan(g, &mut names)).collect();
    let mut name_keys: HashMap<(u32, u8), (u32, u32)> = HashMap::default();
    let mut decided: HashMap<[Vec<(u32, u32)>; 2], Fit> = HashMap::default();
    let mut decided_by_shape: HashMap<Vec<Shaped>, Option<usize>> = HashMap::default();
    let mut correlations: Vec<i64> = replays.keys().copied().collect();
    correlations.sort_unstable();

    for c in correlations {
        let members = replays.remove(&c).expect("listed");
        let events: Vec<Event> = by_start(index, members)
            .into_iter()
            .map(|i| {
                let e = &index.events[i];
                let kind = kind_of(e.cat).expect("work");
                let (full, base) = *name_keys.entry((e.name, kind.code())).or_insert_with(|| {
                    let name = if e.name == u32::MAX { "" } else { index.names.get(e.name) };
                    names.keys(kind, Some(name))
                });
                Event { index: i, full, base, grid_block: index.shape_of(e) }
            })
            .collect();
        let sig = [signature(events.iter().map(|e| e.full)), signature(events.iter().map(|e| e.base))];
        let fit = decided.entry(sig.clone()).or_insert_with(|| fit_by_kernels(&plans, &sig)).clone();
        let chosen = match fit {
            Fit::One(graph, tier) => Some((graph, tier)),
            Fit::Several(graphs, tier) => {
                let slot = tier as usize;
                let seen = shapes(events.iter().map(|e| (if tier == Tier::Full { e.full } else { e.base }, e.grid_block)));
                let graph = *decided_by_shape.entry(seen).or_insert_with_key(|seen| {
                    let same: Vec<usize> = graphs.iter().copied().filter(|&g| plans[g].shapes[slot] == *seen).collect();
                    (same.len() == 1).then(|| same[0])
                });
                match graph {
                    Some(graph) => Some((graph, tier)),
                    None => {
                        report.ambiguous_replays += 1;
                        report.ambiguous_events += events.len() as u64;
                        report.unresolved_events += events.len() as u64;
                        continue;
                    }
                }
            }
            Fit::None => None,
        };
        let assigned = chosen.and_then(|(graph, tier)| assign(&events, &plans[graph], tier, &mut report.tied_events));
        match assigned {
            Some(ids) => {
                report.recovered_replays += 1;
                report.recovered_events += ids.len() as u64;
                for (ev, id) in events.iter().zip(ids) {
                    index.events[ev.index].set_recovered(id as crate::trace::NodeId);
                }
            }
            None => {
                report.unmatched_replays += 1;
                report.unmatched_events += events.len() as u64;
                report.unresolved_events += events.len() as u64;
            }
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAIRS: [(&str, &str); 3] = [
        (
            "_ZN2at6native18elementwise_kernelILi128ELi2EZNS0_22gpu_kernel_impl_nocastINS0_10AbsFunctorIfEEEEvRNS_18TensorIteratorBaseERKT_EUliE_EEviT1_",
            "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::AbsFunctor<float> >(at::TensorIteratorBase&, at::native::AbsFunctor<float> const&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl_nocast<at::native::AbsFunctor<float> >(at::TensorIteratorBase&, at::native::AbsFunctor<float> const&)::{lambda(int)#1})",
        ),
        (
            "_ZN2at6native18elementwise_kernelILi128ELi2EZNS0_22gpu_kernel_impl_nocastIZZZNS0_10glu_kernelERNS_18TensorIteratorBaseEENKUlvE_clEvENKUlvE0_clEvEUlffE_EEvS4_RKT_EUliE_EEviT1_",
            "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::glu_kernel(at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#2}::operator()() const::{lambda(float, float)#1}>(at::TensorIteratorBase&, at::native::glu_kernel(at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#2}::operator()() const::{lambda(float, float)#1} const&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl_nocast<at::native::glu_kernel(at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#2}::operator()() const::{lambda(float, float)#1}>(at::TensorIteratorBase&, at::native::glu_kernel(at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#2}::operator()() const::{lambda(float, float)#1} const&)::{lambda(int)#1})",
        ),
        ("_ZN2at6native12_GLOBAL__N_110add_kernelEPKfPfi", "at::native::(anonymous namespace)::add_kernel(float const*, float*, int)"),
    ];

    /// A trace of replays (correlation, [(kernel, lane, grid)] in start order), each
    /// launched by a `cudaGraphLaunch`, with no `graph node id`.
    fn trace_of(replays: &[(i64, &[(&str, u32, u32)])]) -> TraceIndex {
        let mut events = Vec::new();
        let mut ts = 0;
        for (correlation, kernels) in replays {
            events.push(format!(r#"{{"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 1, "tid": 1, "ts": {ts}, "dur": 1, "args": {{"correlation": {correlation}}}}}"#));
            for (name, lane, grid) in kernels.iter() {
                ts += 10;
                events.push(format!(r#"{{"ph": "X", "cat": "kernel", "name": "{name}", "pid": 0, "tid": {lane}, "ts": {ts}, "dur": 5, "args": {{"correlation": {correlation}, "grid": [{grid}, 1, 1], "block": [128, 1, 1]}}}}"#));
            }
            ts += 100;
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.json");
        std::fs::write(&path, format!(r#"{{"traceEvents": [{}]}}"#, events.join(",\n"))).unwrap();
        crate::scan::scan(&path, &crate::scan::WriteKeys::default(), &mut |_, _| {}).unwrap().0
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

    fn recovered(graphs: Vec<(u32, Vec<GraphNode>)>, replays: &[(i64, &[(&str, u32, u32)])]) -> (Vec<Option<i64>>, Recovery) {
        let mut index = trace_of(replays);
        let annotations = Annotations { nodes: Default::default(), graphs: graphs.into_iter().collect(), ..Default::default() };
        let report = recover(&mut index, &annotations, Recover::Auto);
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
        let (ids, report) = recovered(vec![small, large], &[(5, &[("k", 7, 64), ("m", 7, 64)]), (6, &[("k", 7, 4), ("m", 7, 4)])]);
        let (s, l) = (2i64 << 32, 4i64 << 32);
        assert_eq!(ids, vec![Some(l), Some(l | 1), Some(s), Some(s | 1)]);
        assert_eq!((report.replays, report.recovered_replays, report.ambiguous_replays), (2, 2, 0));
    }

    #[test]
    fn ambiguous_and_unmatched_replays_are_counted_and_left_alone() {
        let twin_a = graph(2, &[("k", 4, &[])]);
        let twin_b = graph(4, &[("k", 4, &[])]);
        let other = graph(6, &[("z", 4, &[]), ("z", 4, &[0])]);
        let (ids, report) = recovered(vec![twin_a, twin_b, other], &[(5, &[("k", 7, 4)]), (6, &[("q", 7, 4), ("q", 7, 4)]), (7, &[("z", 7, 4), ("z", 7, 4)])]);
        let z = 6i64 << 32;
        assert_eq!(ids, vec![None, None, None, Some(z), Some(z | 1)]);
        let counts = (report.replays, report.recovered_replays, report.ambiguous_replays, report.ambiguous_events, report.unmatched_replays, report.unmatched_events, report.unresolved_events);
        assert_eq!(counts, (3, 1, 1, 1, 1, 2, 3));
    }

    #[test]
    fn driver_and_profiler_names_meet() {
        let mut keys = NameKeys::default();
        for (mangled, profiler) in PAIRS {
            assert_eq!(keys.keys(NodeKind::Kernel, Some(mangled)), keys.keys(NodeKind::Kernel, Some(profiler)), "{profiler}");
        }
        assert_ne!(keys.keys(NodeKind::Kernel, Some(PAIRS[0].0)), keys.keys(NodeKind::Kernel, Some(PAIRS[1].0)));
        assert_eq!(keys.keys(NodeKind::Kernel, Some("triton_poi_fused_add_0")), keys.keys(NodeKind::Kernel, Some("triton_poi_fused_add_0")));
        assert_eq!(base_name("void at::native::(anonymous namespace)::k<int>(int)"), "at::native::(anonymous namespace)::k");
        assert_eq!(canonical("void f(Foo const&, constant_t)"), "f(Foo,constant_t)");
    }
}
