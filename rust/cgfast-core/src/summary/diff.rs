//! Which values of a key got slower or faster between two sets of annotated traces
//! (base and test), by how much, and how sure that is: [`diff_files`] gives a [`Diff`].
//!
//! Each graph replay (the graphed kernels of one `args.correlation` of a trace) is one
//! sample. Per replay: its busy time (the union of its kernels per GPU) and, for each
//! value of the key in it, the value's attributed time (each instant of busy time split
//! among the kernels running then, as `summary` has it) and its kernels. A value is
//! compared over the replays it appears in; the total over all replays. The shift of
//! test against base is the Hodges–Lehmann estimate with its 95% interval
//! ([`diff_stats`](super::diff_stats)); a value is `slower` (`faster`) when its interval
//! lies above (below) 0 and the estimate is at least the threshold of its base median,
//! `same` otherwise, `new` or `gone` when one side has none of its kernels.
//!
//! Traces that replay several graphs (a training step's forward and backward graphs)
//! have values whose time per replay differs by graph; pooled, their replays form two
//! humps and the interval is wide. Where every trace of both sides replays the same
//! number of graphs (numbered in the order of their first replay), a value found in the
//! same graphs on both sides is compared graph by graph: the shifts weighted by how
//! often the value appears in each graph's replays, the intervals combined as
//! independent normal errors.
//!
//! Each row also says how much of the change of the mean busy time per replay the value
//! accounts for: its mean attributed time per replay (0 in replays without it), test
//! minus base. These add up to the change of the mean busy time (attributed times sum to
//! the busy time), which medians do not.
//!
//! Memory: a trace is read as `summary` reads it (the graphed kernels only, about 56
//! bytes each) and reduced to per-(value, replay) sums on the thread that read it; only
//! those are kept, so what stays grows with values × replays, not with the traces' size.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use rustc_hash::FxHashMap as HashMap;

use super::diff_stats::{Shift, ShiftFinder, Z};
use super::hierarchy::Hierarchy;
use super::key::{self, KERNEL_KEY};
use super::read::{Kernels, NONE};
use super::time::{attribute, Spread};
use super::{busy, intervals, runs};
use crate::files::many::FilesProgress;
use crate::index::keys::Strings;
use crate::{CancelToken, Error};

/// A change smaller than this share of the base is `same` unless asked otherwise.
pub(crate) const DEFAULT_THRESHOLD: f64 = 0.02;
/// Values with less than this share of the base's busy time are not gated.
pub(crate) const DEFAULT_MIN_SHARE: f64 = 0.01;

/// What a diff compares by, and what it calls a change; `Default` holds the defaults the
/// command line and the Python bindings show as theirs.
#[derive(Clone, Debug, PartialEq)]
pub struct DiffOptions {
    /// The key grouped by; `None`: the first of [`key::DEFAULT_KEYS`] the traces carry.
    pub by: Option<String>,
    /// Keep the first `depth` dotted segments of each value.
    pub depth: Option<usize>,
    /// Merge numbered siblings (`layers.0`, `layers.1`) as `layers.*`.
    pub group_layers: bool,
    /// The hierarchy (the tree rows and the chart's icicle) as asked; `None`: for
    /// module paths and rolled-up values.
    pub tree: Option<bool>,
    /// A change smaller than this share of the base median is `same`.
    pub threshold: f64,
    /// Compare the traces of each rank apart too.
    pub per_rank: bool,
    /// The gate: fail when the total, or a value with at least `min_share` of the base's
    /// busy time, is slower by more than this share with its interval above 0.
    pub fail_if_slower: Option<f64>,
    /// Values with less than this share of the base's busy time are not gated.
    pub min_share: f64,
}

impl Default for DiffOptions {
    fn default() -> Self {
        DiffOptions {
            by: None,
            depth: None,
            group_layers: false,
            tree: None,
            threshold: DEFAULT_THRESHOLD,
            per_rank: false,
            fail_if_slower: None,
            min_share: DEFAULT_MIN_SHARE,
        }
    }
}

impl DiffOptions {
    fn hierarchy(&self, by: &str) -> Hierarchy {
        Hierarchy::new(by, self.depth, self.group_layers, self.tree)
    }
}

/// What a value did between the two sides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Its time per replay rose beyond the threshold, surely.
    Slower,
    /// Its time per replay fell beyond the threshold, surely.
    Faster,
    /// No change beyond the threshold that the interval is sure of.
    Same,
    /// Only the test side has it.
    New,
    /// Only the base side has it.
    Gone,
}

impl Verdict {
    /// Its name in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Slower => "slower",
            Verdict::Faster => "faster",
            Verdict::Same => "same",
            Verdict::New => "new",
            Verdict::Gone => "gone",
        }
    }
}

/// A value's replays on one side.
#[derive(Clone, Debug, PartialEq)]
pub struct SideStats {
    /// Its time per replay (µs): the median over the replays it appears in; compared
    /// graph by graph, each graph's median weighted by how often the value appears in
    /// its replays (on both sides).
    pub median_us: f64,
    /// Its time per replay (µs), over the replays it appears in, all graphs together.
    pub spread: Spread,
    /// The median of its kernels per replay.
    pub kernels_per_replay: f64,
    /// Its mean time per replay over all the side's replays (0 where it is absent).
    pub mean_all_us: f64,
    /// Its time over all replays, µs.
    pub total_us: f64,
}

/// A kernel name of a value on both sides, per replay of the value.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelChange {
    /// The kernel name.
    pub name: String,
    /// Kernels (count) and Σ dur (µs) over the replays the value appears in.
    pub base: (u64, f64),
    /// The same on the test side.
    pub test: (u64, f64),
    /// The same per replay of the value.
    pub base_per_replay: (f64, f64),
    /// The same on the test side.
    pub test_per_replay: (f64, f64),
}

impl KernelChange {
    /// Its change of Σ dur per replay of the value, µs.
    pub fn delta_us(&self) -> f64 {
        self.test_per_replay.1 - self.base_per_replay.1
    }

    /// `both`, or the one side it is on.
    pub fn side(&self) -> &'static str {
        match (self.base.0 > 0, self.test.0 > 0) {
            (true, true) => "both",
            (true, false) => "base",
            _ => "test",
        }
    }
}

/// A value (or, for the total, all of a replay) compared.
#[derive(Clone, Debug, PartialEq)]
pub struct DiffRow {
    /// `None`: kernels without the key (or the total).
    pub value: Option<String>,
    /// What the value did.
    pub verdict: Verdict,
    /// Its replays on the base side (`None`: it is `new`).
    pub base: Option<SideStats>,
    /// Its replays on the test side (`None`: it is `gone`).
    pub test: Option<SideStats>,
    /// Test against base, µs per replay; `None` for `new` and `gone`.
    pub shift: Option<Shift>,
    /// Compared graph by graph (its replays belong to several graphs that both sides
    /// replay), the shifts combined.
    pub by_graph: bool,
    /// Its change of the mean time per replay over all replays, µs.
    pub contribution_us: f64,
    /// Its share of the base's busy time.
    pub base_share: f64,
    /// Its kernels by name, by how much their time per replay changed, most first.
    pub kernels: Vec<KernelChange>,
}

impl DiffRow {
    /// The change, µs per replay: the shift, or all of it for `new` and `gone`.
    pub fn delta_us(&self) -> f64 {
        match (&self.shift, &self.base, &self.test) {
            (Some(s), _, _) => s.estimate,
            (None, None, Some(t)) => t.median_us,
            (None, Some(b), None) => -b.median_us,
            _ => 0.0,
        }
    }

    /// The change as a share of the base median (`None` for `new` and `gone`).
    pub fn relative(&self) -> Option<f64> {
        Some(relative(self.shift?.estimate, self.base.as_ref()?.median_us))
    }

    /// The interval as shares of the base median.
    pub fn relative_interval(&self) -> Option<(f64, f64)> {
        let (s, b) = (self.shift?, self.base.as_ref()?.median_us);
        Some((relative(s.low, b), relative(s.high, b)))
    }
}

fn relative(delta: f64, base: f64) -> f64 {
    if base > 0.0 {
        delta / base
    } else if delta == 0.0 {
        0.0
    } else {
        delta * f64::INFINITY
    }
}

/// The traces of one side of a comparison.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SideInfo {
    /// Traces read.
    pub traces: usize,
    /// Graph replays compared.
    pub replays: usize,
    /// Graphed kernels.
    pub kernels: u64,
}

/// What trips the gate.
#[derive(Clone, Debug, PartialEq)]
pub struct Offender {
    /// The rank compared (`None`: all ranks pooled).
    pub rank: Option<u64>,
    /// `None`: the total.
    pub value: Option<Option<String>>,
    /// How much slower, as a share of the base median.
    pub relative: f64,
    /// The interval of that, as shares of the base median.
    pub relative_interval: (f64, f64),
}

/// Base against test, pooled or for one rank.
#[derive(Clone, Debug, PartialEq)]
pub struct Comparison {
    /// The rank compared (`None`: all ranks pooled).
    pub rank: Option<u64>,
    /// The graphs each trace replays, when all traces of both sides replay as many;
    /// `None` when they differ (replays are then compared all graphs together).
    pub graphs: Option<u32>,
    /// The base side's traces.
    pub base: SideInfo,
    /// The test side's traces.
    pub test: SideInfo,
    /// The busy time per replay.
    pub total: DiffRow,
    /// Every value, by how much of the change they account for, most first.
    pub rows: Vec<DiffRow>,
    /// Every dotted path of the values with all paths under it (module keys), in tree order.
    pub tree: Vec<DiffRow>,
    /// Test's mean busy time per replay minus base's, µs.
    pub mean_delta_us: f64,
    /// The share of `mean_delta_us` the values that are not `same` account for.
    pub explained: Option<f64>,
    /// What trips the gate.
    pub offenders: Vec<Offender>,
}

/// One trace, its rank and counts.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TraceInfo {
    /// The trace.
    pub path: PathBuf,
    /// Its rank (`distributedInfo.rank`, or the number its name starts with).
    pub rank: Option<u64>,
    /// Elements of its `traceEvents`.
    pub events: u64,
    /// Its graphed kernels.
    pub kernels: u64,
    /// Its graph replays.
    pub replays: u64,
    /// Graphed kernels without an `args.correlation`: in no replay, not compared.
    pub without_replay: u64,
    /// Work that is not graphed (not compared).
    pub ungraphed: u64,
    /// Its Σ dur, in nanoseconds.
    pub ungraphed_ns: i64,
    /// Graphed events without a numeric `ts` and `dur` (not compared).
    pub unusable: u64,
}

/// The whole diff.
#[derive(Clone, Debug, PartialEq)]
pub struct Diff {
    /// The key grouped by.
    pub by: String,
    /// Why the key is not the one asked for or the first default one (no graphed kernel
    /// carries it), or that no kernel carries the key asked for.
    pub by_note: Option<String>,
    /// How values are rolled up, and whether the tree is compared.
    pub hierarchy: Hierarchy,
    /// The options asked for.
    pub options: DiffOptions,
    /// The base side's traces.
    pub base_traces: Vec<TraceInfo>,
    /// The test side's traces.
    pub test_traces: Vec<TraceInfo>,
    /// All ranks pooled.
    pub pooled: Comparison,
    /// Rank by rank (with `per_rank`), the ranks both sides have.
    pub ranks: Vec<Comparison>,
    /// Things worth a line: what was left out, ranks on one side only.
    pub notes: Vec<String>,
}

impl Diff {
    /// Everything that trips the gate, the pooled comparison's first.
    pub fn offenders(&self) -> impl Iterator<Item = &Offender> {
        std::iter::once(&self.pooled).chain(&self.ranks).flat_map(|c| &c.offenders)
    }
}

// ---------------------------------------------------------------------------- reading

/// One replay of a trace: its graph, busy time, kernels and cells (`cells[start..start + len]`).
struct ReplaySums {
    /// Which of the trace's graphs, in the order of their first replay.
    graph: u32,
    busy_ns: i64,
    kernels: u32,
    start: u32,
    len: u32,
}

/// A value in a replay.
struct Cell {
    value: u32,
    kernels: u32,
    attributed_ns: f64,
}

/// A trace reduced to per-(value, replay) sums on the thread that read it.
struct TraceReplays {
    info: TraceInfo,
    /// The key it was grouped by ("" for a key asked for).
    key: &'static str,
    carries: bool,
    /// Local value ids: `values.len()` stands for kernels without the key.
    values: Vec<String>,
    replays: Vec<ReplaySums>,
    /// Distinct graphs replayed.
    graphs: u32,
    cells: Vec<Cell>,
    /// (local value, kernel name, kernels, Σ dur ns) over its replays.
    names: Vec<(u32, String, u64, i64)>,
}

fn reduce(path: &Path, k: &Kernels, key: &'static str) -> TraceReplays {
    let kernels = &k.kernels;
    let none = k.values.len() as u32;
    let local = |v: u32| if v == NONE { none } else { v };

    let mut all: Vec<u32> = (0..kernels.len() as u32).collect();
    all.sort_unstable_by_key(|&i| kernels[i as usize].device);
    let mut attributed = vec![0.0; kernels.len()];
    for run in runs(&all, |i| kernels[i as usize].device) {
        for (&i, a) in run.iter().zip(attribute(&intervals(kernels, run))) {
            attributed[i as usize] = a;
        }
    }

    let mut sampled: Vec<u32> = all.into_iter().filter(|&i| kernels[i as usize].replay.is_some()).collect();
    let without_replay = (kernels.len() - sampled.len()) as u64;
    sampled.sort_unstable_by_key(|&i| (kernels[i as usize].replay, kernels[i as usize].value));
    let mut replays = Vec::new();
    let mut cells = Vec::new();
    let mut names: HashMap<(u32, u32), (u64, i64)> = HashMap::default();
    // each graph's first replay start, to number the graphs in that order
    let mut first_start: HashMap<u64, i64> = HashMap::default();
    let mut graph_of = Vec::new();
    for run in runs(&sampled, |i| kernels[i as usize].replay) {
        let graph = kernels[run[0] as usize].graph;
        let start_ns = run.iter().map(|&i| kernels[i as usize].start).min().expect("not empty");
        let first = first_start.entry(graph).or_insert(start_ns);
        *first = (*first).min(start_ns);
        graph_of.push(graph);
        let start = cells.len() as u32;
        for same in runs(run, |i| kernels[i as usize].value) {
            let value = local(kernels[same[0] as usize].value);
            cells.push(Cell {
                value,
                kernels: same.len() as u32,
                attributed_ns: same.iter().map(|&i| attributed[i as usize]).sum(),
            });
            for &i in same {
                let kernel = &kernels[i as usize];
                let n = names.entry((value, kernel.name)).or_default();
                n.0 += 1;
                n.1 += kernel.end - kernel.start;
            }
        }
        replays.push(ReplaySums {
            graph: 0,
            busy_ns: busy(kernels, &mut run.to_vec()),
            kernels: run.len() as u32,
            start,
            len: cells.len() as u32 - start,
        });
    }
    let mut order: Vec<(i64, u64)> = first_start.iter().map(|(&g, &t)| (t, g)).collect();
    order.sort_unstable();
    let ordinal: HashMap<u64, u32> = order.iter().enumerate().map(|(k, &(_, g))| (g, k as u32)).collect();
    for (r, g) in replays.iter_mut().zip(graph_of) {
        r.graph = ordinal[&g];
    }
    let info = TraceInfo {
        path: path.to_path_buf(),
        rank: k.rank.or_else(|| crate::files::paths::rank_of_name(path)),
        events: k.events,
        kernels: kernels.len() as u64,
        replays: replays.len() as u64,
        without_replay,
        ungraphed: k.ungraphed,
        ungraphed_ns: k.ungraphed_ns,
        unusable: k.unusable,
    };
    TraceReplays {
        info,
        key,
        carries: key::carries(k),
        values: (0..none).map(|v| k.values.get(v).to_string()).collect(),
        replays,
        graphs: order.len() as u32,
        cells,
        names: names.into_iter().map(|((v, n), (c, ns))| (v, k.names.get(n).to_string(), c, ns)).collect(),
    }
}

fn read_trace(
    path: &Path,
    options: &DiffOptions,
    cancel: &CancelToken,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<TraceReplays, Error> {
    let (mut kernels, key) = key::read_keyed(path, options.by.as_deref(), cancel, progress)?;
    let by = options.by.as_deref().unwrap_or(key);
    options.hierarchy(by).apply(&mut kernels);
    Ok(reduce(path, &kernels, key))
}

// ---------------------------------------------------------------------------- samples

/// Kernels of a name and their Σ dur (ns).
type NameSums = (u64, i64);

/// A value's samples: the replays (of its group) it appears in, its time and kernels there.
#[derive(Default)]
struct Samples {
    replay: Vec<u32>,
    us: Vec<f64>,
    kernels: Vec<u32>,
}

/// The replays of one side (pooled, or one rank).
#[derive(Default)]
struct Group {
    traces: usize,
    /// The graphs each trace replays.
    graphs_per_trace: Vec<u32>,
    /// Per replay: its graph (its trace's numbering), busy time, kernels.
    graph: Vec<u32>,
    busy_us: Vec<f64>,
    kernels: Vec<u32>,
    /// By global value id.
    values: Vec<Samples>,
    /// (global value, global name) -> its kernels.
    names: HashMap<(u32, u32), NameSums>,
}

/// Global ids of values (`None`: without the key) and kernel names.
#[derive(Default)]
struct Tables {
    value_ids: HashMap<Option<String>, u32>,
    values: Vec<Option<String>>,
    names: Strings,
}

impl Tables {
    fn value(&mut self, value: Option<&str>) -> u32 {
        if let Some(&id) = self.value_ids.get(&value.map(str::to_string)) {
            return id;
        }
        let id = self.values.len() as u32;
        self.values.push(value.map(str::to_string));
        self.value_ids.insert(value.map(str::to_string), id);
        id
    }
}

impl Group {
    /// Add a trace's replays; `collapse`: its kernels count as without the key.
    fn add(&mut self, t: &TraceReplays, ids: &[u32], names: &[u32], collapse: bool) {
        self.traces += 1;
        self.graphs_per_trace.push(t.graphs);
        let mut merged: Vec<(u32, u32, f64)> = Vec::new();
        for r in &t.replays {
            let replay = self.busy_us.len() as u32;
            self.graph.push(r.graph);
            self.busy_us.push(r.busy_ns as f64 / 1e3);
            self.kernels.push(r.kernels);
            merged.clear();
            for c in &t.cells[r.start as usize..(r.start + r.len) as usize] {
                merged.push((ids[c.value as usize], c.kernels, c.attributed_ns));
            }
            if collapse {
                let kernels = merged.iter().map(|c| c.1).sum();
                let ns = merged.iter().map(|c| c.2).sum();
                merged.clear();
                merged.push((ids[ids.len() - 1], kernels, ns));
            }
            for &(value, kernels, ns) in &merged {
                if self.values.len() <= value as usize {
                    self.values.resize_with(value as usize + 1, Samples::default);
                }
                let s = &mut self.values[value as usize];
                s.replay.push(replay);
                s.us.push(ns / 1e3);
                s.kernels.push(kernels);
            }
        }
        for (k, (value, _, count, ns)) in t.names.iter().enumerate() {
            let value = if collapse { ids[ids.len() - 1] } else { ids[*value as usize] };
            let n = self.names.entry((value, names[k])).or_default();
            n.0 += count;
            n.1 += ns;
        }
    }

    fn samples(&self, value: u32) -> Option<&Samples> {
        self.values.get(value as usize).filter(|s| !s.us.is_empty())
    }

    fn info(&self) -> SideInfo {
        SideInfo {
            traces: self.traces,
            replays: self.busy_us.len(),
            kernels: self.kernels.iter().map(|&k| k as u64).sum(),
        }
    }
}

fn median(values: &mut [f64]) -> f64 {
    Spread::of(values).median
}

fn side_stats(s: &Samples, group: &Group, median_us: Option<f64>) -> SideStats {
    let total_us: f64 = s.us.iter().sum();
    let spread = Spread::of(&mut s.us.clone());
    SideStats {
        median_us: median_us.unwrap_or(spread.median),
        spread,
        kernels_per_replay: median(&mut s.kernels.iter().map(|&k| k as f64).collect::<Vec<_>>()),
        mean_all_us: total_us / group.busy_us.len().max(1) as f64,
        total_us,
    }
}

// ---------------------------------------------------------------------------- comparing

struct Compare<'a> {
    tables: &'a Tables,
    options: &'a DiffOptions,
    /// Threads the rows are worked out on (0: one per core).
    jobs: usize,
    /// Compare graph by graph, this many (the comparison at hand).
    graphs: Option<u32>,
}

/// A row to work out: a value (by id), or a dotted path with the values under it.
enum Job {
    Value(u32),
    Path(String, Vec<u32>),
}

/// A shift compared graph by graph, and each side's weighted median.
struct ByGraph {
    shift: Shift,
    medians: (f64, f64),
}

impl Compare<'_> {
    /// The shift of `test` against `base` graph by graph, where they replay several
    /// graphs and the value is in the same ones on both sides: each graph's
    /// Hodges-Lehmann shift, weighted by the value's replays in that graph (both sides),
    /// and an interval from each graph's, taken as independent normal errors
    /// (`σ = (high - low) / 2z`). `None` where a plain comparison applies.
    fn by_graph(
        &self,
        finder: &mut ShiftFinder,
        base: &Samples,
        test: &Samples,
        groups: (&Group, &Group),
    ) -> Option<ByGraph> {
        let graphs = self.graphs? as usize;
        let split = |s: &Samples, g: &Group| {
            let mut by: Vec<Vec<f64>> = vec![Vec::new(); graphs];
            for (&r, &us) in s.replay.iter().zip(&s.us) {
                by[g.graph[r as usize] as usize].push(us);
            }
            by
        };
        let (mut xs, mut ys) = (split(base, groups.0), split(test, groups.1));
        if xs.iter().zip(&ys).any(|(x, y)| x.is_empty() != y.is_empty()) {
            return None;
        }
        let present: Vec<usize> = (0..graphs).filter(|&k| !xs[k].is_empty()).collect();
        if present.len() < 2 {
            return None;
        }
        let total: usize = present.iter().map(|&k| xs[k].len() + ys[k].len()).sum();
        let (mut estimate, mut variance, mut medians) = (0.0, 0.0, (0.0, 0.0));
        for k in present {
            let w = (xs[k].len() + ys[k].len()) as f64 / total as f64;
            let s = finder.shift(&mut xs[k], &mut ys[k]).expect("both sides have replays");
            estimate += w * s.estimate;
            let sigma = (s.high - s.low) / (2.0 * Z);
            variance += w * w * sigma * sigma;
            medians.0 += w * median(&mut xs[k]);
            medians.1 += w * median(&mut ys[k]);
        }
        let half = Z * variance.sqrt();
        // an infinite end (too few replays of a graph) leaves the interval unbounded
        let (low, high) = if half.is_finite() {
            (estimate - half, estimate + half)
        } else {
            (f64::NEG_INFINITY, f64::INFINITY)
        };
        Some(ByGraph { shift: Shift { estimate, low, high }, medians })
    }

    fn row(
        &self,
        finder: &mut ShiftFinder,
        value: Option<String>,
        base: Option<&Samples>,
        test: Option<&Samples>,
        groups: (&Group, &Group),
    ) -> DiffRow {
        let by_graph = match (base, test) {
            (Some(b), Some(t)) => self.by_graph(finder, b, t, groups),
            _ => None,
        };
        let b = base.map(|s| side_stats(s, groups.0, by_graph.as_ref().map(|g| g.medians.0)));
        let t = test.map(|s| side_stats(s, groups.1, by_graph.as_ref().map(|g| g.medians.1)));
        let shift = match (base, test, &by_graph) {
            (_, _, Some(g)) => Some(g.shift),
            (Some(b), Some(t), None) => finder.shift(&mut b.us.clone(), &mut t.us.clone()),
            _ => None,
        };
        let verdict = match (&b, &t, shift) {
            (None, _, _) => Verdict::New,
            (_, None, _) => Verdict::Gone,
            (Some(b), Some(_), Some(s)) => {
                let change = relative(s.estimate, b.median_us);
                if s.low > 0.0 && change >= self.options.threshold {
                    Verdict::Slower
                } else if s.high < 0.0 && change <= -self.options.threshold {
                    Verdict::Faster
                } else {
                    Verdict::Same
                }
            }
            _ => Verdict::Same,
        };
        let base_busy: f64 = groups.0.busy_us.iter().sum();
        DiffRow {
            value,
            verdict,
            contribution_us: t.as_ref().map_or(0.0, |t| t.mean_all_us)
                - b.as_ref().map_or(0.0, |b| b.mean_all_us),
            base_share: if base_busy > 0.0 {
                b.as_ref().map_or(0.0, |b| b.total_us) / base_busy
            } else {
                0.0
            },
            base: b,
            test: t,
            shift,
            by_graph: by_graph.is_some(),
            kernels: Vec::new(),
        }
    }

    fn kernels(&self, value: u32, base: &Group, test: &Group, replays: (usize, usize)) -> Vec<KernelChange> {
        let mut by_name: BTreeMap<u32, (NameSums, NameSums)> = BTreeMap::new();
        for (side, group) in [(0, base), (1, test)] {
            for (&(v, name), &n) in &group.names {
                if v == value {
                    let e = by_name.entry(name).or_default();
                    if side == 0 {
                        e.0 = n;
                    } else {
                        e.1 = n;
                    }
                }
            }
        }
        let per = |(count, ns): NameSums, replays: usize| {
            let r = replays.max(1) as f64;
            (count as f64 / r, ns as f64 / 1e3 / r)
        };
        let mut changes: Vec<KernelChange> = by_name
            .into_iter()
            .map(|(name, (b, t))| KernelChange {
                name: self.tables.names.get(name).to_string(),
                base: (b.0, b.1 as f64 / 1e3),
                test: (t.0, t.1 as f64 / 1e3),
                base_per_replay: per(b, replays.0),
                test_per_replay: per(t, replays.1),
            })
            .collect();
        changes.sort_by(|a, b| {
            b.delta_us().abs().total_cmp(&a.delta_us().abs()).then_with(|| a.name.cmp(&b.name))
        });
        changes
    }

    fn compare(&mut self, rank: Option<u64>, base: &Group, test: &Group, tree: bool) -> Comparison {
        let groups = (base, test);
        let counts: BTreeSet<u32> =
            base.graphs_per_trace.iter().chain(&test.graphs_per_trace).copied().collect();
        let graphs = (counts.len() == 1).then(|| *counts.first().expect("one"));
        self.graphs = graphs.filter(|&g| g > 1);
        let all = |g: &Group| Samples {
            replay: (0..g.busy_us.len() as u32).collect(),
            us: g.busy_us.clone(),
            kernels: g.kernels.clone(),
        };
        let mut total =
            self.row(&mut ShiftFinder::default(), None, Some(&all(base)), Some(&all(test)), groups);
        total.base_share = 1.0;
        let values: Vec<Job> = (0..self.tables.values.len() as u32)
            .filter(|&id| base.samples(id).is_some() || test.samples(id).is_some())
            .map(Job::Value)
            .collect();
        let mut rows: Vec<DiffRow> = self.rows(&values, groups).into_iter().flatten().collect();
        let tree = if tree {
            // a path that is one value alone (a leaf) has that value's row (`Some` here);
            // the others are worked out
            let mut jobs = Vec::new();
            let mut slots: Vec<Option<Option<DiffRow>>> = Vec::new();
            for (path, ids) in self.paths() {
                match ids.as_slice() {
                    &[id] if self.tables.values[id as usize].as_deref() == Some(path.as_str()) => {
                        let at = values.iter().position(|j| matches!(j, Job::Value(v) if *v == id));
                        slots.push(Some(at.map(|at| DiffRow { kernels: Vec::new(), ..rows[at].clone() })));
                    }
                    _ => {
                        slots.push(None);
                        jobs.push(Job::Path(path, ids));
                    }
                }
            }
            let mut worked = self.rows(&jobs, groups).into_iter();
            slots
                .into_iter()
                .filter_map(|slot| slot.unwrap_or_else(|| worked.next().expect("a row per path job")))
                .collect()
        } else {
            Vec::new()
        };
        rows.sort_by(|a, b| {
            b.contribution_us
                .abs()
                .total_cmp(&a.contribution_us.abs())
                .then_with(|| b.delta_us().abs().total_cmp(&a.delta_us().abs()))
                .then_with(|| a.value.cmp(&b.value))
        });
        let mean = |g: &Group| g.busy_us.iter().sum::<f64>() / g.busy_us.len().max(1) as f64;
        let mean_delta_us = mean(test) - mean(base);
        let changed: f64 =
            rows.iter().filter(|r| r.verdict != Verdict::Same).map(|r| r.contribution_us).sum();
        let mut comparison = Comparison {
            rank,
            graphs,
            base: base.info(),
            test: test.info(),
            total,
            rows,
            tree,
            mean_delta_us,
            explained: (mean_delta_us != 0.0).then(|| changed / mean_delta_us),
            offenders: Vec::new(),
        };
        if let Some(limit) = self.options.fail_if_slower {
            comparison.offenders = offenders(&comparison, limit, self.options.min_share);
        }
        comparison
    }

    /// Every dotted path of the values, in tree order, with the values under it
    /// (itself included).
    fn paths(&self) -> Vec<(String, Vec<u32>)> {
        let mut under: BTreeMap<Vec<Segment>, Vec<u32>> = BTreeMap::new();
        for (id, value) in self.tables.values.iter().enumerate() {
            let Some(value) = value else { continue };
            let segments: Vec<&str> = value.split('.').collect();
            for depth in 1..=segments.len() {
                let path: Vec<Segment> = segments[..depth].iter().map(|s| Segment::of(s)).collect();
                under.entry(path).or_default().push(id as u32);
            }
        }
        under
            .into_iter()
            .map(|(path, ids)| (path.iter().map(|s| s.text.as_str()).collect::<Vec<_>>().join("."), ids))
            .collect()
    }

    /// The rows of `jobs`, in order, worked out on up to `jobs` threads (a finder each);
    /// a path with no replay on either side has none.
    fn rows(&self, jobs: &[Job], groups: (&Group, &Group)) -> Vec<Option<DiffRow>> {
        let threads = crate::files::many::threads(self.jobs).min(jobs.len()).max(1);
        let mut out: Vec<Option<DiffRow>> = (0..jobs.len()).map(|_| None).collect();
        std::thread::scope(|scope| {
            let workers: Vec<_> = (0..threads)
                .map(|first| {
                    scope.spawn(move || {
                        let mut finder = ShiftFinder::default();
                        (first..jobs.len())
                            .step_by(threads)
                            .map(|i| (i, self.job_row(&mut finder, &jobs[i], groups)))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            for worker in workers {
                for (i, row) in worker.join().expect("a comparison thread") {
                    out[i] = row;
                }
            }
        });
        out
    }

    fn job_row(&self, finder: &mut ShiftFinder, job: &Job, groups: (&Group, &Group)) -> Option<DiffRow> {
        let (base, test) = groups;
        match job {
            Job::Value(id) => {
                let (b, t) = (base.samples(*id), test.samples(*id));
                let mut row = self.row(finder, self.tables.values[*id as usize].clone(), b, t, groups);
                let replays = (b.map_or(0, |s| s.us.len()), t.map_or(0, |s| s.us.len()));
                row.kernels = self.kernels(*id, base, test, replays);
                Some(row)
            }
            Job::Path(path, ids) => {
                let (b, t) = (merged(base, ids), merged(test, ids));
                if b.is_none() && t.is_none() {
                    return None;
                }
                Some(self.row(finder, Some(path.clone()), b.as_ref(), t.as_ref(), groups))
            }
        }
    }
}

/// A path segment: named ones in their order, then numbered ones by number (as the
/// icicle puts numbered layers in their order).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Segment {
    number: Option<u64>,
    text: String,
}

impl Segment {
    fn of(text: &str) -> Segment {
        let digits = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
        Segment { number: if digits { text.parse().ok() } else { None }, text: text.to_string() }
    }
}

/// The samples of all of `ids` together: per replay, their times and kernels summed.
fn merged(group: &Group, ids: &[u32]) -> Option<Samples> {
    let mut cells: Vec<(u32, f64, u32)> = Vec::new();
    for &id in ids {
        if let Some(s) = group.samples(id) {
            cells.extend(s.replay.iter().zip(&s.us).zip(&s.kernels).map(|((&r, &us), &k)| (r, us, k)));
        }
    }
    if cells.is_empty() {
        return None;
    }
    cells.sort_unstable_by_key(|c| c.0);
    let mut out = Samples::default();
    for c in cells {
        if out.replay.last() == Some(&c.0) {
            *out.us.last_mut().expect("a sample") += c.1;
            *out.kernels.last_mut().expect("a sample") += c.2;
        } else {
            out.replay.push(c.0);
            out.us.push(c.1);
            out.kernels.push(c.2);
        }
    }
    Some(out)
}

fn offenders(c: &Comparison, limit: f64, min_share: f64) -> Vec<Offender> {
    let slower = |r: &DiffRow| match (r.shift, r.relative(), r.relative_interval()) {
        (Some(s), Some(change), Some(interval)) if s.low > 0.0 && change > limit => Some((change, interval)),
        _ => None,
    };
    let mut found = Vec::new();
    if let Some((relative, relative_interval)) = slower(&c.total) {
        found.push(Offender { rank: c.rank, value: None, relative, relative_interval });
    }
    for r in c.rows.iter().filter(|r| r.base_share >= min_share) {
        if let Some((relative, relative_interval)) = slower(r) {
            found.push(Offender { rank: c.rank, value: Some(r.value.clone()), relative, relative_interval });
        }
    }
    found
}

// ---------------------------------------------------------------------------- the run

/// Diff the annotated traces `base` against `test` (files, as `inputs::find` gives them)
/// on `jobs` threads (0: one per core). Any trace that cannot be read, a side without
/// graphed replays, or a key one side carries and the other does not, is an error (one
/// line); `progress` sees the base's files first, then the test's; reading stops once
/// `cancel` is cancelled.
pub fn diff_files(
    base: &[PathBuf],
    test: &[PathBuf],
    options: &DiffOptions,
    jobs: usize,
    progress: &dyn FilesProgress,
    cancel: &CancelToken,
) -> Result<Diff, Error> {
    let incomparable = |message: String| Error::Inputs { message };
    if base.is_empty() || test.is_empty() {
        return Err(incomparable(format!(
            "no {} traces given",
            if base.is_empty() { "base" } else { "test" }
        )));
    }
    let paths: Vec<&PathBuf> = base.iter().chain(test).collect();
    let results = crate::files::many::map(
        &paths,
        jobs,
        |i, path| {
            read_trace(path, options, cancel, &mut |done, total| {
                progress.advance(i, done as f64 / total.max(1) as f64)
            })
        },
        &mut |i, r| {
            progress.finished(i, matches!(r, Some(Ok(_))));
            progress.show();
        },
        &mut || progress.show(),
    );
    let mut read = Vec::with_capacity(results.len());
    let mut failures = Vec::new();
    for (path, result) in paths.iter().zip(results) {
        match result {
            Some(Ok(t)) => read.push(t),
            Some(Err(error)) => failures.push(error),
            None => failures.push(Error::Internal { path: path.to_path_buf() }),
        }
    }
    if cancel.is_cancelled() {
        return Err(Error::Cancelled);
    }
    let more = failures.len().saturating_sub(1);
    if let Some(first) = failures.into_iter().next() {
        return Err(match more {
            0 => first,
            n => incomparable(format!("{first} (and {n} more traces could not be read)")),
        });
    }
    let test_read = read.split_off(base.len());
    build(read, test_read, options, jobs).map_err(incomparable)
}

fn side_name(test: bool) -> &'static str {
    if test {
        "test"
    } else {
        "base"
    }
}

/// The key both sides are grouped by, and the note that says why where it was chosen.
fn agree_on_key(
    sides: [&[TraceReplays]; 2],
    options: &DiffOptions,
) -> Result<(String, Option<String>), String> {
    if let Some(by) = &options.by {
        if by == KERNEL_KEY {
            return Ok((by.clone(), None));
        }
        let carries = sides.map(|s| s.iter().any(|t| t.carries));
        return match carries {
            [true, false] | [false, true] => Err(format!(
                "{} is on the {} traces only (no graphed kernel of the {} traces carries it): annotate both runs alike, or pick another --by",
                key::label(by),
                side_name(carries[1]),
                side_name(carries[0]),
            )),
            [false, false] => Ok((
                by.clone(),
                Some(format!("no graphed kernel carries {}: all are (unannotated)", key::label(by))),
            )),
            _ => Ok((by.clone(), None)),
        };
    }
    let best =
        sides.map(|s| s.iter().map(|t| t.key).min_by_key(|k| key::rank_of_key(k)).unwrap_or(KERNEL_KEY));
    if best[0] != best[1] {
        let (first, second) =
            if key::rank_of_key(best[0]) < key::rank_of_key(best[1]) { (0, 1) } else { (1, 0) };
        return Err(format!(
            "the {} traces carry {} and the {} traces do not (their best key is {}): annotate both runs alike, or pick the key with --by",
            side_name(first == 1),
            key::label(best[first]),
            side_name(second == 1),
            key::label(best[second]),
        ));
    }
    Ok((best[0].to_string(), key::fallback_note(best[0])))
}

fn build(
    base: Vec<TraceReplays>,
    test: Vec<TraceReplays>,
    options: &DiffOptions,
    jobs: usize,
) -> Result<Diff, String> {
    for (side, traces) in [("base", &base), ("test", &test)] {
        let kernels: u64 = traces.iter().map(|t| t.info.kernels).sum();
        if kernels == 0 {
            let n = traces.len();
            return Err(format!(
                "the {side} trace{} no graphed kernels (work with a graph node id other than 0): diff reads the outputs of cgfast annotate",
                if n == 1 { " has".to_string() } else { format!("s ({n}) have") }
            ));
        }
        if traces.iter().all(|t| t.replays.is_empty()) {
            return Err(format!(
                "the {side} traces' graphed kernels have no args.correlation: no replay to compare"
            ));
        }
    }
    let (by, by_note) = agree_on_key([&base, &test], options)?;
    let hierarchy = options.hierarchy(&by);
    let mut notes = Vec::new();

    let mut tables = Tables::default();
    let mut sides: [(Group, BTreeMap<u64, Group>); 2] = Default::default();
    for (s, traces) in [&base, &test].into_iter().enumerate() {
        for t in traces {
            if options.per_rank && t.info.rank.is_none() {
                return Err(format!(
                    "{}: no rank for --per-rank (the trace has no distributedInfo.rank and its name does not start with one)",
                    t.info.path.display()
                ));
            }
            // Traces grouped by a later default key than the one chosen lack the chosen one.
            let collapse = options.by.is_none() && t.key != by;
            let mut ids: Vec<u32> = t.values.iter().map(|v| tables.value(Some(v))).collect();
            ids.push(tables.value(None));
            let names: Vec<u32> = t.names.iter().map(|n| tables.names.intern(&n.1)).collect();
            let (pooled, ranks) = &mut sides[s];
            pooled.add(t, &ids, &names, collapse);
            if let (true, Some(rank)) = (options.per_rank, t.info.rank) {
                ranks.entry(rank).or_default().add(t, &ids, &names, collapse);
            }
        }
    }
    // Values of no replay (their kernels had no correlation) would have no row: keep the
    // tables as they are, rows skip values without samples.
    let [(base_pooled, base_ranks), (test_pooled, test_ranks)] = &sides;
    let mut compare = Compare { tables: &tables, options, jobs, graphs: None };
    let pooled = compare.compare(None, base_pooled, test_pooled, hierarchy.tree);
    let mut ranks = Vec::new();
    if options.per_rank {
        for (rank, b) in base_ranks {
            match test_ranks.get(rank) {
                Some(t) => ranks.push(compare.compare(Some(*rank), b, t, hierarchy.tree)),
                None => {
                    notes.push(format!("rank {rank} is on the base side only: not compared rank by rank"))
                }
            }
        }
        for rank in test_ranks.keys().filter(|r| !base_ranks.contains_key(r)) {
            notes.push(format!("rank {rank} is on the test side only: not compared rank by rank"));
        }
    }
    for c in std::iter::once(&pooled).chain(&ranks).filter(|c| c.graphs.is_none()) {
        let count = |traces: &[TraceReplays]| {
            let counts: BTreeSet<u32> = traces
                .iter()
                .filter(|t| c.rank.is_none() || t.info.rank == c.rank)
                .map(|t| t.graphs)
                .collect();
            counts.iter().map(u32::to_string).collect::<Vec<_>>().join(" or ")
        };
        let rank = c.rank.map_or(String::new(), |r| format!("rank {r}: "));
        notes.push(format!(
            "{rank}the traces replay different numbers of graphs (base {}, test {}): each value's replays are compared all graphs together",
            count(&base),
            count(&test)
        ));
    }
    let info = |traces: &[TraceReplays]| traces.iter().map(|t| t.info.clone()).collect::<Vec<_>>();
    let (base_traces, test_traces) = (info(&base), info(&test));
    for (side, traces) in [("base", &base_traces), ("test", &test_traces)] {
        let without: u64 = traces.iter().map(|t| t.without_replay).sum();
        if without > 0 {
            notes.push(format!("{without} graphed kernels of the {side} traces have no args.correlation: in no replay, not compared"));
        }
    }
    Ok(Diff {
        by,
        by_note,
        hierarchy,
        options: options.clone(),
        base_traces,
        test_traces,
        pooled,
        ranks,
        notes,
    })
}

#[cfg(test)]
mod tests;
