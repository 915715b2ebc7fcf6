//! Node ids for traces whose profiler wrote none: each replay's events (one
//! `cudaGraphLaunch` correlation) are matched to a recorded graph by their kernels,
//! then to its nodes in dependency order.

use std::collections::BTreeSet;

use rustc_hash::FxHashMap as HashMap;

use crate::annotations::{Annotations, GraphNode, NodeKind};
use crate::index::keys::Num;
use crate::index::{Cat, Node, NodeId, ReplayMarker, Stamp, TraceIndex};
use crate::passes::sort_by_start;

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
    /// Events whose node was the lowest local id among several eligible candidates of
    /// the same kind, name and launch shape.
    pub tied_events: u64,
    /// Replays needed ids but the annotations hold no graph topology.
    pub no_topology: bool,
    /// Replays matched to the graph their `cgfast.replay` stamp names.
    pub stamped_replays: u64,
    /// Replays that several graphs fit, all giving every event the same annotation:
    /// given the lowest such graph's ids.
    pub equivalent_replays: u64,
    /// Stamps naming a graph the annotations do not have (then matched as unstamped).
    pub unknown_stamps: u64,
    /// Stamps naming a graph whose kernels do not fit the replay (then matched as
    /// unstamped).
    pub unfit_stamps: u64,
    /// Ranges named `cgfast.replay...` that name no graph: ignored.
    pub malformed_stamps: u64,
    /// Recovered replays whose kernels met their graph's by base names only (some
    /// driver and profiler spellings of one function did not meet).
    pub base_name_replays: u64,
    /// Whether stamps were read and equivalent replays annotated (the counts above
    /// are reported).
    pub exact: bool,
}

impl Recovery {
    /// Ambiguous and unmatched events together: those left without an id.
    pub fn unresolved_events(&self) -> u64 {
        self.ambiguous_events + self.unmatched_events
    }
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

/// A demangled signature without its return type (`void `, or one such as
/// `std::enable_if<!(false), void>::type ` that CUPTI writes for cuBLAS's gemv) and
/// without `[clone .x]` suffixes: the name starts after the last space outside brackets
/// before the parameter list (the first `(` outside brackets that opens no
/// `(anonymous namespace)`).
fn without_return_type(readable: &str) -> &str {
    const ANONYMOUS: &str = "(anonymous namespace)";
    let mut text = readable.trim();
    while let Some(head) = text.strip_suffix(']').and_then(|t| t.rfind(" [clone ").map(|at| &t[..at])) {
        text = head.trim_end();
    }
    let bytes = text.as_bytes();
    let (mut depth, mut start, mut i) = (0i32, 0, 0);
    while i < bytes.len() {
        match bytes[i] {
            b'(' if depth == 0 && text[i..].starts_with(ANONYMOUS) => i += ANONYMOUS.len() - 1,
            b'(' if depth == 0 => break,
            b'<' | b'(' | b'{' | b'[' => depth += 1,
            b'>' | b')' | b'}' | b']' => depth -= 1,
            b' ' if depth == 0 => start = i + 1,
            _ => {}
        }
        i += 1;
    }
    // `operator<`, `operator>>` and the like unbalance the count: keep such names whole
    if depth != 0 {
        return text;
    }
    &text[start..]
}

/// What the profiler's and cpp_demangle's spellings of one kernel have in common: no
/// leading return type, no white space, and no `const` or `&` (which the two demanglers
/// place differently on lambda types).
fn canonical(readable: &str) -> String {
    let body = without_return_type(readable);
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
    literal_suffixes(&out)
}

/// Integer template arguments as the profiler writes them (`3ul`, `5ll`), where
/// cpp_demangle writes casts (`(unsigned long)3`); in text without white space.
fn literal_suffixes(text: &str) -> String {
    const CASTS: [(&str, &str); 5] = [
        ("(unsignedlonglong)", "ull"),
        ("(longlong)", "ll"),
        ("(unsignedlong)", "ul"),
        ("(unsignedint)", "u"),
        ("(long)", "l"),
    ];
    if !text.contains(")") {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    'scan: while let Some(at) = rest.find('(') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        for (cast, suffix) in CASTS {
            if let Some(after) = rest.strip_prefix(cast) {
                let digits = after
                    .char_indices()
                    .find(|&(i, c)| !(c.is_ascii_digit() || (i == 0 && c == '-')))
                    .map_or(after.len(), |(i, _)| i);
                if digits > 0 && after[..digits] != *"-" {
                    out.push_str(&after[..digits]);
                    out.push_str(suffix);
                    rest = &after[digits..];
                    continue 'scan;
                }
            }
        }
        out.push('(');
        rest = &rest[1..];
    }
    out.push_str(rest);
    out
}

/// `void ns::kernel<T>(args)` -> `ns::kernel`.
fn base_name(readable: &str) -> String {
    const ANONYMOUS: &str = "(anonymous namespace)";
    let readable = without_return_type(readable);
    let mut from = 0;
    let end = loop {
        match readable[from..].find(['<', '(']) {
            None => break readable.len(),
            Some(k) if readable[from + k..].starts_with(ANONYMOUS) => from += k + ANONYMOUS.len(),
            Some(k) => break from + k,
        }
    };
    readable[..end].to_string()
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
pub fn recover(index: &mut TraceIndex, annotations: &Annotations, mode: Recover) -> Recovery {
    recover_with(index, annotations, mode, true)
}

/// [`recover`]; `exact` reads replay stamps and annotates equivalent replays (without
/// it, matching is by topology alone, as before stamps).
pub fn recover_with(
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
    let candidate = |e: &crate::index::Tracked| {
        !e.odd()
            && kind_of(e.cat).is_some()
            && e.correlation().is_some_and(|c| index.graph_launches.contains(&c))
    };
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
        return report;
    }

    let mut names = NameKeys::default();
    let plans: Vec<Plan> = annotations.graphs.values().map(|g| plan(g, &mut names)).collect();
    let plan_of: HashMap<u32, usize> = annotations.graphs.keys().enumerate().map(|(i, g)| (*g, i)).collect();
    let stamped = if exact { stamped_graphs(index, &replays) } else { HashMap::default() };
    let mut name_keys: HashMap<(u32, u8), (u32, u32)> = HashMap::default();
    let mut decided: HashMap<[Vec<(u32, u32)>; 2], Fit> = HashMap::default();
    let mut decided_by_shape: HashMap<Vec<Shaped>, Vec<usize>> = HashMap::default();
    let mut decided_equivalent: HashMap<(Tier, Vec<Shaped>), Option<Assigned>> = HashMap::default();
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
        if let Some(graph) = stamped.get(&c) {
            match plan_of.get(graph) {
                None => report.unknown_stamps += 1,
                Some(&g) => {
                    let mut tied = 0;
                    match tier_of(&plans[g], &sig)
                        .and_then(|tier| assign(&events, &plans[g], tier, &mut tied).map(|ids| (ids, tier)))
                    {
                        Some(assigned) => {
                            report.stamped_replays += 1;
                            report.tied_events += tied;
                            set_recovered(index, &events, assigned, &mut report);
                            continue;
                        }
                        None => report.unfit_stamps += 1,
                    }
                }
            }
        }
        let fit = decided.entry(sig.clone()).or_insert_with(|| fit_by_kernels(&plans, &sig)).clone();
        let chosen = match fit {
            Fit::One(graph, tier) => Some((graph, tier)),
            Fit::Several(graphs, tier) => {
                let slot = tier as usize;
                let key = |e: &Event| (if tier == Tier::Full { e.full } else { e.base }, e.grid_block);
                let seen = shapes(events.iter().map(key));
                let same = decided_by_shape.entry(seen).or_insert_with_key(|seen| {
                    graphs.iter().copied().filter(|&g| plans[g].shapes[slot] == *seen).collect()
                });
                if same.len() == 1 {
                    Some((same[0], tier))
                } else {
                    let found = if exact {
                        let candidates = if same.is_empty() { &graphs } else { &*same };
                        decided_equivalent
                            .entry((tier, events.iter().map(key).collect()))
                            .or_insert_with(|| equivalent(&events, &plans, candidates, tier, annotations))
                            .clone()
                    } else {
                        None
                    };
                    match found {
                        Some((ids, tied)) => {
                            report.equivalent_replays += 1;
                            report.tied_events += tied;
                            set_recovered(index, &events, (ids, tier), &mut report);
                        }
                        None => leave_alone(index, &events, ReplayMarker::Ambiguous, exact, &mut report),
                    }
                    continue;
                }
            }
            Fit::None => None,
        };
        let assigned = chosen.and_then(|(graph, tier)| {
            assign(&events, &plans[graph], tier, &mut report.tied_events).map(|ids| (ids, tier))
        });
        match assigned {
            Some(assigned) => set_recovered(index, &events, assigned, &mut report),
            None => leave_alone(index, &events, ReplayMarker::Unmatched, exact, &mut report),
        }
    }
    report
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

    const PAIRS: [(&str, &str); 5] = [
        (
            "_ZN8internal5gemvx6kernelIiiffffLb0ELb1ELb1ELb0ELi7ELb0E18cublasGemvParamsExIi30cublasGemvTensorStridedBatchedIKfES5_S3_IfEfEEENSt9enable_ifIXntT5_EvE4typeET11_",
            "std::enable_if<!(false), void>::type internal::gemvx::kernel<int, int, float, float, float, float, false, true, true, false, 7, false, cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, float> >(cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, float>)",
        ),
        ("_ZN2at6native12_GLOBAL__N_110add_kernelEPKfPfi.constprop.0", "void at::native::(anonymous namespace)::add_kernel(float const*, float*, int) [clone .constprop.0]"),
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
        crate::read::scan::scan(&path, &crate::read::scan::WriteKeys::default(), &mut |_, _| {}).unwrap().0
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

    #[test]
    fn driver_and_profiler_names_meet() {
        let mut keys = NameKeys::default();
        for (mangled, profiler) in PAIRS {
            assert_eq!(
                keys.keys(NodeKind::Kernel, Some(mangled)),
                keys.keys(NodeKind::Kernel, Some(profiler)),
                "{profiler}"
            );
        }
        assert_ne!(
            keys.keys(NodeKind::Kernel, Some(PAIRS[0].0)),
            keys.keys(NodeKind::Kernel, Some(PAIRS[1].0))
        );
        assert_eq!(
            keys.keys(NodeKind::Kernel, Some("triton_poi_fused_add_0")),
            keys.keys(NodeKind::Kernel, Some("triton_poi_fused_add_0"))
        );
        assert_eq!(
            base_name("void at::native::(anonymous namespace)::k<int>(int)"),
            "at::native::(anonymous namespace)::k"
        );
        assert_eq!(base_name(PAIRS[0].1), "internal::gemvx::kernel");
        assert_eq!(without_return_type("bool operator<(A, B)"), "bool operator<(A, B)");
        // c++filt's (and CUPTI's) integer literals, against cpp_demangle's casts
        assert_eq!(
            keys.keys(NodeKind::Kernel, Some("_Z1fILx5ELy6ELj7ELl8ELln2ELs9ELm3EEvv")),
            keys.keys(NodeKind::Kernel, Some("void f<5ll, 6ull, 7u, 8l, -2l, (short)9, 3ul>()"))
        );
        assert_ne!(
            keys.keys(NodeKind::Kernel, Some("_Z1fILm3EEvv")),
            keys.keys(NodeKind::Kernel, Some("void f<3u>()"))
        );
        assert_eq!(canonical("void f(Foo const&, constant_t)"), "f(Foo,constant_t)");
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

    /// The kernel names of a trace and the driver names of its annotations' graphs.
    fn example_names(dir: &std::path::Path) -> Option<(Vec<String>, Vec<String>)> {
        let trace = dir.join("000000.h200.pt.trace.json.gz");
        let annotations = std::fs::read_dir(dir)
            .ok()?
            .flatten()
            .map(|e| e.path())
            .find(|p| p.to_string_lossy().contains("kernel_annotations"))?;
        let annotations = crate::annotations::file::read(&annotations).ok()?;
        let index =
            crate::read::scan::scan(&trace, &crate::read::scan::WriteKeys::default(), &mut |_, _| {}).ok()?.0;
        let profiler = index
            .events
            .iter()
            .filter(|e| e.cat == Cat::Kernel)
            .map(|e| index.name_of(e).to_string())
            .collect();
        let driver = annotations.graphs.values().flatten().filter_map(|n| n.name.clone()).collect();
        Some((profiler, driver))
    }

    /// A bundled trace's folder (`examples/` also holds scripts, and their `__pycache__`).
    fn is_example_dir(entry: &std::fs::DirEntry) -> bool {
        entry.path().is_dir() && !entry.file_name().to_string_lossy().starts_with(['_', '.'])
    }

    #[test]
    fn every_driver_name_of_the_examples_meets_a_profiler_name() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
        let mut checked = 0;
        for dir in std::fs::read_dir(&root).unwrap().flatten().filter(is_example_dir) {
            let (profiler, driver) =
                example_names(&dir.path()).expect("an example with a trace and annotations");
            let mut keys = NameKeys::default();
            let seen: rustc_hash::FxHashSet<(u32, u32)> =
                profiler.iter().map(|n| keys.keys(NodeKind::Kernel, Some(n))).collect();
            for name in &driver {
                assert!(
                    seen.contains(&keys.keys(NodeKind::Kernel, Some(name))),
                    "{}: {name} meets no kernel of the trace",
                    dir.path().display()
                );
                checked += 1;
            }
        }
        assert!(checked > 100, "{checked}");
    }

    #[test]
    fn every_profiler_name_of_the_fixtures_keeps_its_function_name() {
        // The H200 fixtures have no annotations: each name, with its return type gone,
        // must start with the function's qualified name, whatever its return type was.
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures/h200");
        let Ok(files) = std::fs::read_dir(&root) else { return };
        let mut checked = 0;
        for file in files.flatten() {
            let index = crate::read::scan::scan(
                &file.path(),
                &crate::read::scan::WriteKeys::default(),
                &mut |_, _| {},
            )
            .unwrap()
            .0;
            for e in index.events.iter().filter(|e| e.cat == Cat::Kernel) {
                let name = index.name_of(e);
                let bare = without_return_type(name);
                let function = base_name(name).replace("(anonymous namespace)", "");
                assert!(
                    name.ends_with(bare) && !function.is_empty() && !function.contains([' ', '(', ')']),
                    "{name}"
                );
                assert_eq!(name.contains('('), bare.contains('('), "{name}");
                checked += 1;
            }
        }
        assert!(checked > 0);
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
