//! What a diff reports: the options it ran with, a row per value compared, each side's
//! traces, and the gate's offenders.

use std::path::PathBuf;

use super::super::hierarchy::Hierarchy;
use super::super::time::Spread;
use super::bootstrap::MIN_RUNS;
use crate::summary::diff_stats::Shift;

/// A change smaller than this share of the base is `same` unless asked otherwise.
const DEFAULT_THRESHOLD: f64 = 0.02;
/// Values with less than this share of the base's busy time are not gated.
const DEFAULT_MIN_SHARE: f64 = 0.01;
/// A change smaller than this share of the base's mean busy time per replay is `same`:
/// on an H200, kernels of modules left unchanged moved by up to 0.01% of the replay when
/// another layer was widened (memory placement, cache), surely but not of their doing.
const DEFAULT_MIN_CHANGE: f64 = 0.001;

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
    /// A change smaller than this share of the base's mean busy time per replay is `same`.
    pub min_change: f64,
    /// Compare the traces of each rank apart too.
    pub per_rank: bool,
    /// The gate: fail when the total, or a value with at least `min_share` of the base's
    /// busy time, is slower by more than this share with its interval above 0.
    pub fail_if_slower: Option<f64>,
    /// Values with less than this share of the base's busy time are not gated.
    pub min_share: f64,
    /// Every trace of a side is of one run: the intervals hold the spread between
    /// replays only, and nothing is said of runs (the output before runs were told apart).
    pub pool_runs: bool,
}

impl Default for DiffOptions {
    fn default() -> Self {
        DiffOptions {
            by: None,
            depth: None,
            group_layers: false,
            tree: None,
            threshold: DEFAULT_THRESHOLD,
            min_change: DEFAULT_MIN_CHANGE,
            per_rank: false,
            fail_if_slower: None,
            min_share: DEFAULT_MIN_SHARE,
            pool_runs: false,
        }
    }
}

impl DiffOptions {
    pub(super) fn hierarchy(&self, by: &str) -> Hierarchy {
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
    /// its replays (on both sides); compared between runs, the mean over its runs of
    /// each run's (so weighted) median.
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
    /// Where both sides have several runs: the runs each side has the value in (0 on a
    /// side without it). Its interval holds the spread between runs where both are at
    /// least [`MIN_RUNS`]; otherwise it is the one between replays.
    pub runs: Option<(usize, usize)>,
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

    /// Whether its interval holds the spread between runs (the hierarchical bootstrap).
    pub fn between_runs(&self) -> bool {
        self.runs.is_some_and(|(b, t)| b >= MIN_RUNS && t >= MIN_RUNS)
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

pub(super) fn relative(delta: f64, base: f64) -> f64 {
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
    /// Runs: processes, the traces of one counted once ([`runs`](super::runs)).
    pub runs: usize,
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

impl Comparison {
    /// Whether both sides have [`MIN_RUNS`] runs, so that intervals hold the spread
    /// between runs (of the values in that many runs on each side).
    pub fn between_runs(&self) -> bool {
        self.base.runs >= MIN_RUNS && self.test.runs >= MIN_RUNS
    }
}

impl Diff {
    /// Everything that trips the gate, the pooled comparison's first.
    pub fn offenders(&self) -> impl Iterator<Item = &Offender> {
        std::iter::once(&self.pooled).chain(&self.ranks).flat_map(|c| &c.offenders)
    }
}
