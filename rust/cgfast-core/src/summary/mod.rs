//! Where the GPU time of graph replays goes, per value of an annotation key.
//!
//! Only graphed work counts (kernels, memcpys and memsets whose `args["graph node
//! id"]` is present and not 0). Definitions, per trace and GPU (`pid`), summed over
//! GPUs and traces:
//! - *busy time*: the length of the union of the kernels' `[ts, ts + dur)`, over all
//!   lanes, so kernels overlapping on different streams count once;
//! - *attributed time* of a kernel: each instant of busy time split equally among
//!   the kernels running then; the attributed times of all kernels sum to the busy
//!   time, and a value's *share* is its kernels' attributed time over the busy time,
//!   so the shares of all values (the unannotated ones included) sum to 100%;
//! - a value's own *busy time*: the union of its kernels alone (what it would take
//!   if nothing else ran; these may sum to more than the busy time).
//!
//! (Over 600 lines: the summary's types, their JSON and the entry points are one
//! vocabulary, which the files beside this one share.)

pub(crate) mod chart;
pub(crate) mod diff;
pub(crate) mod diff_chart;
pub(crate) mod diff_json;
pub(crate) mod diff_stats;
pub(crate) mod efficiency;
pub(crate) mod hierarchy;
pub(crate) mod icicle;
pub(crate) mod key;
pub(crate) mod peaks;
pub(crate) mod read;
pub(crate) mod roofline;
pub(crate) mod throughput_change;
pub(crate) mod time;

use std::path::{Path, PathBuf};

use rustc_hash::FxHashMap as HashMap;
use serde_json::{json, Value as Json};

use crate::files::many::FilesProgress;
use crate::{CancelToken, Error};
use efficiency::CountTotals;
use hierarchy::Hierarchy;
use read::{Kernel, Kernels, NONE};
use time::{attribute, union_length, Interval, Spread};

/// What a summary groups by and shows; `Default` holds the defaults the command line
/// and the Python bindings show as theirs.
#[derive(Clone, Debug)]
pub struct SummaryOptions {
    /// The `args` key grouped by.
    pub by: String,
    /// Also per replay (per `args.correlation`).
    pub steps: bool,
    /// Kernel names listed per value.
    pub top: usize,
    /// Values rolled up as module paths, and the chart's tree.
    pub hierarchy: Hierarchy,
    /// No key asked for: `by` is the first of [`key::DEFAULT_KEYS`] the traces carry,
    /// and the hierarchy's tree is drawn as this says.
    pub default_key: Option<key::DefaultKey>,
}

impl Default for SummaryOptions {
    fn default() -> Self {
        SummaryOptions {
            by: "name".into(),
            steps: false,
            top: 3,
            hierarchy: Hierarchy::default(),
            default_key: None,
        }
    }
}

/// One kernel name's kernels within a value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NameTotals {
    /// Kernels of the name.
    pub kernels: u64,
    /// Their Σ dur, in nanoseconds.
    pub total_ns: i64,
}

/// One value's kernels, over every trace summarised.
#[derive(Clone, Debug, Default)]
pub struct ValueTotals {
    /// Its kernels.
    pub kernels: u64,
    /// Σ dur.
    pub total_ns: i64,
    /// The union of its kernels' intervals, in nanoseconds.
    pub busy_ns: i64,
    /// The busy time attributed to its kernels, in nanoseconds.
    pub attributed_ns: f64,
    /// Its kernels by name.
    pub by_name: HashMap<String, NameTotals>,
    /// Its attributed time in each replay it appears in (with `steps`).
    pub per_replay_ns: Vec<f64>,
    /// Its kernels that carry capture-time FLOP and byte counts.
    pub counted: CountTotals,
}

/// One trace's totals.
#[derive(Clone, Debug, Default)]
pub struct TraceTotals {
    /// The trace.
    pub path: PathBuf,
    /// Elements of its `traceEvents`.
    pub events: u64,
    /// Its graphed kernels (and memcpys and memsets).
    pub kernels: u64,
    /// Their Σ dur, in nanoseconds.
    pub total_ns: i64,
    /// Its busy time (per GPU, summed), in nanoseconds.
    pub busy_ns: i64,
    /// Distinct correlations of its graphed kernels.
    pub replays: u64,
    /// Graphed kernels without a correlation.
    pub without_replay: u64,
    /// Work that is not graphed (not counted).
    pub ungraphed: u64,
    /// Its Σ dur, in nanoseconds.
    pub ungraphed_ns: i64,
    /// Graphed events without a numeric `ts` and `dur` (not counted).
    pub unusable: u64,
    /// Of the ungraphed work, that launched by a `cudaGraphLaunch`: graphed work whose
    /// replay `cgfast annotate` left without ids (ambiguous, or matching no graph).
    pub unresolved: u64,
    /// Their Σ dur, in nanoseconds.
    pub unresolved_ns: i64,
    /// Of the ungraphed work, that annotate marked as left by an ambiguous replay
    /// (count, nanoseconds); not in `unresolved`, which keeps the unmarked rest.
    pub ambiguous: (u64, i64),
    /// The same for unmatched replays.
    pub unmatched: (u64, i64),
    /// The GPUs its `deviceProperties` names.
    pub gpu_names: Vec<String>,
}

/// One value's kernels within one replay.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplayValue {
    /// The value (`None`: kernels without the key).
    pub value: Option<String>,
    /// Its kernels in the replay.
    pub kernels: u64,
    /// Their Σ dur, in nanoseconds.
    pub total_ns: i64,
    /// The union of their intervals, in nanoseconds.
    pub busy_ns: i64,
    /// The replay's busy time attributed to them, in nanoseconds.
    pub attributed_ns: f64,
}

/// One replay: the graphed kernels of one correlation of one trace.
#[derive(Clone, Debug, PartialEq)]
pub struct Replay {
    /// Index into [`Summary::traces`].
    pub trace: usize,
    /// Its `args.correlation`.
    pub correlation: i64,
    /// When its first kernel starts, in nanoseconds.
    pub start_ns: i64,
    /// When its last kernel ends, in nanoseconds.
    pub end_ns: i64,
    /// Its kernels.
    pub kernels: u64,
    /// Their Σ dur, in nanoseconds.
    pub total_ns: i64,
    /// The union of their intervals, in nanoseconds.
    pub busy_ns: i64,
    /// By attributed time, largest first.
    pub values: Vec<ReplayValue>,
}

/// Where the GPU time of the graph replays of one or more traces goes, per value of
/// an annotation key.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// The `args` key grouped by.
    pub by: String,
    /// Whether it is also per replay.
    pub steps: bool,
    /// Each trace's totals.
    pub traces: Vec<TraceTotals>,
    /// `None`: graphed kernels without the key.
    pub values: HashMap<Option<String>, ValueTotals>,
    /// Each replay, with `steps`.
    pub replays: Vec<Replay>,
    /// How values are rolled up, and whether the chart draws their tree.
    pub hierarchy: Hierarchy,
}

/// `kernels[i]` for the indices in `idx`, as intervals.
fn intervals(kernels: &[Kernel], idx: &[u32]) -> Vec<Interval> {
    idx.iter().map(|&i| Interval { start: kernels[i as usize].start, end: kernels[i as usize].end }).collect()
}

/// Busy time of the kernels in `idx` (any order): the union per GPU, summed.
fn busy(kernels: &[Kernel], idx: &mut [u32]) -> i64 {
    idx.sort_unstable_by_key(|&i| kernels[i as usize].device);
    runs(idx, |i| kernels[i as usize].device).map(|run| union_length(&mut intervals(kernels, run))).sum()
}

/// The runs of equal `key` in `idx` (sorted by it).
fn runs<K: PartialEq>(idx: &[u32], key: impl Fn(u32) -> K) -> impl Iterator<Item = &[u32]> {
    let mut rest = idx;
    std::iter::from_fn(move || {
        let first = *rest.first()?;
        let k = key(first);
        let n = rest.iter().position(|&i| key(i) != k).unwrap_or(rest.len());
        let (run, tail) = rest.split_at(n);
        rest = tail;
        Some(run)
    })
}

fn text_of(k: &Kernels, value: u32) -> Option<String> {
    (value != NONE).then(|| k.values.get(value).to_string())
}

impl Summary {
    /// The summary of one trace's graphed kernels.
    pub(crate) fn of_trace(path: &Path, k: &Kernels, options: &SummaryOptions) -> Summary {
        let kernels = &k.kernels;
        let mut all: Vec<u32> = (0..kernels.len() as u32).collect();
        all.sort_unstable_by_key(|&i| kernels[i as usize].device);
        let mut attributed = vec![0.0; kernels.len()];
        let mut busy_ns = 0;
        for run in runs(&all, |i| kernels[i as usize].device) {
            let mut spans = intervals(kernels, run);
            for (&i, a) in run.iter().zip(attribute(&spans)) {
                attributed[i as usize] = a;
            }
            busy_ns += union_length(&mut spans);
        }

        let mut values: HashMap<Option<String>, ValueTotals> = HashMap::default();
        all.sort_unstable_by_key(|&i| kernels[i as usize].value);
        for run in runs(&all, |i| kernels[i as usize].value) {
            let t = values.entry(text_of(k, kernels[run[0] as usize].value)).or_default();
            for &i in run {
                let kernel = &kernels[i as usize];
                t.kernels += 1;
                t.total_ns += kernel.end - kernel.start;
                t.attributed_ns += attributed[i as usize];
                let name = t.by_name.entry(k.names.get(kernel.name).to_string()).or_default();
                name.kernels += 1;
                name.total_ns += kernel.end - kernel.start;
                if let Some(counts) = kernel.counts {
                    let dtype = (kernel.dtype != NONE).then(|| k.dtypes.get(kernel.dtype));
                    t.counted.add_kernel(counts, dtype, attributed[i as usize]);
                }
            }
            t.busy_ns += busy(kernels, &mut run.to_vec());
            let mut counted_replays: Vec<i64> = run
                .iter()
                .filter_map(|&i| kernels[i as usize].counts.and(kernels[i as usize].replay))
                .collect();
            counted_replays.sort_unstable();
            counted_replays.dedup();
            t.counted.replays += counted_replays.len() as u64;
        }

        let mut with_replay: Vec<u32> =
            all.iter().copied().filter(|&i| kernels[i as usize].replay.is_some()).collect();
        with_replay.sort_unstable_by_key(|&i| (kernels[i as usize].replay, kernels[i as usize].value));
        let replay_runs = runs(&with_replay, |i| kernels[i as usize].replay);
        let mut replays = Vec::new();
        let replay_count = if options.steps {
            for run in replay_runs {
                let replay = replay_of(k, run, &attributed);
                for v in &replay.values {
                    values
                        .get_mut(&v.value)
                        .expect("a value of this trace")
                        .per_replay_ns
                        .push(v.attributed_ns);
                }
                replays.push(replay);
            }
            replays.sort_by_key(|r| (r.start_ns, r.correlation));
            replays.len()
        } else {
            replay_runs.count()
        };

        let trace = TraceTotals {
            path: path.to_path_buf(),
            events: k.events,
            kernels: kernels.len() as u64,
            total_ns: kernels.iter().map(|k| k.end - k.start).sum(),
            busy_ns,
            replays: replay_count as u64,
            without_replay: (kernels.len() - with_replay.len()) as u64,
            ungraphed: k.ungraphed,
            ungraphed_ns: k.ungraphed_ns,
            unusable: k.unusable,
            unresolved: k.ungraphed_correlated.iter().filter(|(c, _)| k.graph_launches.contains(c)).count()
                as u64,
            unresolved_ns: k
                .ungraphed_correlated
                .iter()
                .filter(|(c, _)| k.graph_launches.contains(c))
                .map(|(_, d)| d)
                .sum(),
            ambiguous: k.ambiguous,
            unmatched: k.unmatched,
            gpu_names: k.gpu_names.clone(),
        };
        Summary {
            by: options.by.clone(),
            steps: options.steps,
            traces: vec![trace],
            values,
            replays,
            hierarchy: options.hierarchy,
        }
    }

    /// Add another summary (of other traces) to this one.
    pub fn merge(&mut self, other: Summary) {
        let offset = self.traces.len();
        self.traces.extend(other.traces);
        for (value, t) in other.values {
            let mine = self.values.entry(value).or_default();
            mine.kernels += t.kernels;
            mine.total_ns += t.total_ns;
            mine.busy_ns += t.busy_ns;
            mine.attributed_ns += t.attributed_ns;
            mine.per_replay_ns.extend(t.per_replay_ns);
            mine.counted.merge(t.counted);
            for (name, n) in t.by_name {
                let m = mine.by_name.entry(name).or_default();
                m.kernels += n.kernels;
                m.total_ns += n.total_ns;
            }
        }
        self.replays.extend(other.replays.into_iter().map(|r| Replay { trace: r.trace + offset, ..r }));
    }

    /// The busy time of all its traces, in nanoseconds.
    pub fn busy_ns(&self) -> i64 {
        self.traces.iter().map(|t| t.busy_ns).sum()
    }
}

/// A replay's totals; `run` holds its kernels sorted by value.
fn replay_of(k: &Kernels, run: &[u32], attributed: &[f64]) -> Replay {
    let kernels = &k.kernels;
    let first = &kernels[run[0] as usize];
    let mut values: Vec<ReplayValue> = runs(run, |i| kernels[i as usize].value)
        .map(|v| ReplayValue {
            value: text_of(k, kernels[v[0] as usize].value),
            kernels: v.len() as u64,
            total_ns: v.iter().map(|&i| kernels[i as usize].end - kernels[i as usize].start).sum(),
            busy_ns: busy(kernels, &mut v.to_vec()),
            attributed_ns: v.iter().map(|&i| attributed[i as usize]).sum(),
        })
        .collect();
    values.sort_by(|a, b| b.attributed_ns.total_cmp(&a.attributed_ns).then_with(|| a.value.cmp(&b.value)));
    Replay {
        trace: 0,
        correlation: first.replay.expect("replays have a correlation"),
        start_ns: run.iter().map(|&i| kernels[i as usize].start).min().expect("not empty"),
        end_ns: run.iter().map(|&i| kernels[i as usize].end).max().expect("not empty"),
        kernels: run.len() as u64,
        total_ns: values.iter().map(|v| v.total_ns).sum(),
        busy_ns: busy(kernels, &mut run.to_vec()),
        values,
    }
}

/// A value's line of the report.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// The value (`None`: kernels without the key).
    pub value: Option<String>,
    /// Its kernels.
    pub kernels: u64,
    /// Their Σ dur, in microseconds.
    pub total_us: f64,
    /// Their mean dur, in microseconds.
    pub mean_us: f64,
    /// The union of their intervals, in microseconds.
    pub busy_us: f64,
    /// The busy time attributed to them, in microseconds.
    pub attributed_us: f64,
    /// attributed / the busy time of all graphed kernels, 0..1.
    pub share: f64,
    /// The kernel names that took most of its time (Σ dur), largest first.
    pub top_kernels: Vec<(String, NameTotals)>,
    /// Its attributed µs per replay, over the replays it appears in (with `steps`).
    pub per_replay: Option<Spread>,
}

fn us(ns: f64) -> f64 {
    ns / 1000.0
}

fn us_i(ns: i64) -> f64 {
    ns as f64 / 1000.0
}

fn ratio(part: f64, whole: f64) -> f64 {
    if whole > 0.0 {
        part / whole
    } else {
        0.0
    }
}

impl Summary {
    /// The values, by attributed time, largest first.
    pub fn rows(&self, top: usize) -> Vec<Row> {
        let busy = self.busy_ns() as f64;
        let mut rows: Vec<Row> = self
            .values
            .iter()
            .map(|(value, t)| {
                let mut names: Vec<(String, NameTotals)> =
                    t.by_name.iter().map(|(n, v)| (n.clone(), *v)).collect();
                names.sort_by(|a, b| b.1.total_ns.cmp(&a.1.total_ns).then_with(|| a.0.cmp(&b.0)));
                names.truncate(top);
                Row {
                    value: value.clone(),
                    kernels: t.kernels,
                    total_us: us_i(t.total_ns),
                    mean_us: ratio(us_i(t.total_ns), t.kernels as f64),
                    busy_us: us_i(t.busy_ns),
                    attributed_us: us(t.attributed_ns),
                    share: ratio(t.attributed_ns, busy),
                    top_kernels: names,
                    per_replay: self
                        .steps
                        .then(|| Spread::of(&mut t.per_replay_ns.iter().map(|&n| us(n)).collect::<Vec<_>>())),
                }
            })
            .collect();
        rows.sort_by(|a, b| {
            b.attributed_us
                .total_cmp(&a.attributed_us)
                .then_with(|| b.total_us.total_cmp(&a.total_us))
                .then_with(|| a.value.cmp(&b.value))
        });
        rows
    }

    /// The numbers above the rows.
    pub fn totals(&self) -> Totals {
        let unannotated = self.values.get(&None);
        let busy = self.busy_ns();
        Totals {
            traces: self.traces.len() as u64,
            events: self.traces.iter().map(|t| t.events).sum(),
            kernels: self.traces.iter().map(|t| t.kernels).sum(),
            replays: self.traces.iter().map(|t| t.replays).sum(),
            total_us: us_i(self.traces.iter().map(|t| t.total_ns).sum()),
            busy_us: us_i(busy),
            unannotated_kernels: unannotated.map_or(0, |u| u.kernels),
            unannotated_us: unannotated.map_or(0.0, |u| us(u.attributed_ns)),
            // + 0.0: a sum of no floats is -0.0, which would print as "-0.0%"
            coverage: ratio(
                self.values.iter().filter(|(v, _)| v.is_some()).map(|(_, t)| t.attributed_ns).sum::<f64>()
                    + 0.0,
                busy as f64,
            )
            .min(1.0),
            ungraphed_kernels: self.traces.iter().map(|t| t.ungraphed).sum(),
            ungraphed_us: us_i(self.traces.iter().map(|t| t.ungraphed_ns).sum()),
            unusable_events: self.traces.iter().map(|t| t.unusable).sum(),
            unresolved_kernels: self.traces.iter().map(|t| t.unresolved).sum(),
            unresolved_us: us_i(self.traces.iter().map(|t| t.unresolved_ns).sum()),
            ambiguous_replay_kernels: self.traces.iter().map(|t| t.ambiguous.0).sum(),
            ambiguous_replay_us: us_i(self.traces.iter().map(|t| t.ambiguous.1).sum()),
            unmatched_replay_kernels: self.traces.iter().map(|t| t.unmatched.0).sum(),
            unmatched_replay_us: us_i(self.traces.iter().map(|t| t.unmatched.1).sum()),
        }
    }

    /// Busy time and span per replay, over all replays.
    pub fn replay_spread(&self) -> (Spread, Spread) {
        let mut busy: Vec<f64> = self.replays.iter().map(|r| us_i(r.busy_ns)).collect();
        let mut span: Vec<f64> = self.replays.iter().map(|r| us_i(r.end_ns - r.start_ns)).collect();
        (Spread::of(&mut busy), Spread::of(&mut span))
    }
}

/// The numbers above the rows.
#[derive(Clone, Debug, PartialEq)]
pub struct Totals {
    /// Traces summarised.
    pub traces: u64,
    /// Elements of their `traceEvents`.
    pub events: u64,
    /// Graphed kernels.
    pub kernels: u64,
    /// Replays (distinct correlations of graphed kernels).
    pub replays: u64,
    /// Σ dur of the graphed kernels.
    pub total_us: f64,
    /// The busy time: the union of the graphed kernels' intervals, per trace and GPU, in microseconds.
    pub busy_us: f64,
    /// Graphed kernels without the key.
    pub unannotated_kernels: u64,
    /// Busy time attributed to unannotated kernels.
    pub unannotated_us: f64,
    /// Share of the busy time attributed to annotated kernels.
    pub coverage: f64,
    /// Kernels that are not graphed (not counted).
    pub ungraphed_kernels: u64,
    /// Their Σ dur, in microseconds.
    pub ungraphed_us: f64,
    /// Graphed events without a numeric `ts` and `dur` (not counted).
    pub unusable_events: u64,
    /// Of the ungraphed kernels, those a `cudaGraphLaunch` launched: their replay was
    /// left unresolved (ambiguous or unmatched) when the trace was annotated, and no
    /// marker says which (annotated by an older cgfast, or with `--topology-only`).
    pub unresolved_kernels: u64,
    /// Their Σ dur, in microseconds.
    pub unresolved_us: f64,
    /// Of the ungraphed kernels, those annotate marked as left by an ambiguous replay.
    pub ambiguous_replay_kernels: u64,
    /// Their Σ dur, in microseconds.
    pub ambiguous_replay_us: f64,
    /// Those it marked as left by a replay that matched no recorded graph.
    pub unmatched_replay_kernels: u64,
    /// Their Σ dur, in microseconds.
    pub unmatched_replay_us: f64,
}

fn spread_json(s: &Spread) -> Json {
    json!({"count": s.count, "min": s.min, "median": s.median, "max": s.max, "mean": s.mean, "stdev": s.stdev})
}

impl Row {
    /// The row as `cgfast summary --format json` writes it.
    pub fn to_json(&self) -> Json {
        let mut v = json!({
            "value": self.value,
            "kernels": self.kernels,
            "total_us": self.total_us,
            "mean_us": self.mean_us,
            "busy_us": self.busy_us,
            "attributed_us": self.attributed_us,
            "share": self.share,
            "top_kernels": self.top_kernels.iter().map(|(name, n)| json!({"name": name, "kernels": n.kernels, "total_us": us_i(n.total_ns)})).collect::<Vec<_>>(),
        });
        if let Some(s) = &self.per_replay {
            v["replays"] = json!(s.count);
            v["replay_min_us"] = json!(s.min);
            v["replay_median_us"] = json!(s.median);
            v["replay_max_us"] = json!(s.max);
            v["replay_stdev_us"] = json!(s.stdev);
        }
        v
    }
}

impl ReplayValue {
    /// Its totals in `replay`, as JSON fields.
    fn to_json(&self, replay: &Replay) -> serde_json::Map<String, Json> {
        let Json::Object(fields) = json!({
            "value": self.value,
            "kernels": self.kernels,
            "total_us": us_i(self.total_ns),
            "busy_us": us_i(self.busy_ns),
            "attributed_us": us(self.attributed_ns),
            "share": ratio(self.attributed_ns, replay.busy_ns as f64),
        }) else {
            unreachable!("an object")
        };
        fields
    }
}

impl Summary {
    /// One row per value per replay, flat (for CSV and data frames).
    pub fn replay_rows(&self) -> Vec<Json> {
        let mut rows = Vec::new();
        for r in &self.replays {
            let trace = self.traces[r.trace].path.display().to_string();
            for v in &r.values {
                let mut row = json!({"trace": trace, "replay": r.correlation});
                let fields = row.as_object_mut().expect("an object");
                fields.extend(v.to_json(r));
                fields.insert("replay_start_us".into(), json!(us_i(r.start_ns)));
                fields.insert("replay_span_us".into(), json!(us_i(r.end_ns - r.start_ns)));
                fields.insert("replay_busy_us".into(), json!(us_i(r.busy_ns)));
                rows.push(row);
            }
        }
        rows
    }

    /// The whole report, as `--format json` prints it.
    pub fn to_json(&self, top: usize) -> Json {
        let t = self.totals();
        let mut v = json!({
            "by": self.by,
            "totals": {
                "traces": t.traces,
                "events": t.events,
                "kernels": t.kernels,
                "replays": t.replays,
                "total_us": t.total_us,
                "busy_us": t.busy_us,
                "unannotated_kernels": t.unannotated_kernels,
                "unannotated_us": t.unannotated_us,
                "coverage": t.coverage,
                "ungraphed_kernels": t.ungraphed_kernels,
                "ungraphed_us": t.ungraphed_us,
                "unusable_events": t.unusable_events,
            },
            "traces": self.traces.iter().map(|t| json!({
                "path": t.path.display().to_string(),
                "events": t.events,
                "kernels": t.kernels,
                "replays": t.replays,
                "total_us": us_i(t.total_ns),
                "busy_us": us_i(t.busy_ns),
                "kernels_without_correlation": t.without_replay,
                "ungraphed_kernels": t.ungraphed,
                "ungraphed_us": us_i(t.ungraphed_ns),
                "unusable_events": t.unusable,
            })).collect::<Vec<_>>(),
            "rows": self.rows(top).iter().map(Row::to_json).collect::<Vec<_>>(),
        });
        if self.hierarchy.rolls_up() {
            v["depth"] = json!(self.hierarchy.depth);
            v["group_layers"] = json!(self.hierarchy.group_layers);
        }
        // only where there are some, so that other traces' reports read as before
        if t.unresolved_kernels > 0 {
            v["totals"]["unresolved_kernels"] = json!(t.unresolved_kernels);
            v["totals"]["unresolved_us"] = json!(t.unresolved_us);
            for (out, trace) in v["traces"].as_array_mut().expect("an array").iter_mut().zip(&self.traces) {
                out["unresolved_kernels"] = json!(trace.unresolved);
                out["unresolved_us"] = json!(us_i(trace.unresolved_ns));
            }
        }
        if t.ambiguous_replay_kernels + t.unmatched_replay_kernels > 0 {
            v["totals"]["ambiguous_replay_kernels"] = json!(t.ambiguous_replay_kernels);
            v["totals"]["ambiguous_replay_us"] = json!(t.ambiguous_replay_us);
            v["totals"]["unmatched_replay_kernels"] = json!(t.unmatched_replay_kernels);
            v["totals"]["unmatched_replay_us"] = json!(t.unmatched_replay_us);
            for (out, trace) in v["traces"].as_array_mut().expect("an array").iter_mut().zip(&self.traces) {
                out["ambiguous_replay_kernels"] = json!(trace.ambiguous.0);
                out["ambiguous_replay_us"] = json!(us_i(trace.ambiguous.1));
                out["unmatched_replay_kernels"] = json!(trace.unmatched.0);
                out["unmatched_replay_us"] = json!(us_i(trace.unmatched.1));
            }
        }
        if self.steps {
            let (busy, span) = self.replay_spread();
            v["replay_spread"] = json!({"busy_us": spread_json(&busy), "span_us": spread_json(&span)});
            v["replays"] = self
                .replays
                .iter()
                .map(|r| {
                    json!({
                        "trace": self.traces[r.trace].path.display().to_string(),
                        "replay": r.correlation,
                        "start_us": us_i(r.start_ns),
                        "span_us": us_i(r.end_ns - r.start_ns),
                        "kernels": r.kernels,
                        "total_us": us_i(r.total_ns),
                        "busy_us": us_i(r.busy_ns),
                        "values": r.values.iter().map(|v| Json::Object(v.to_json(r))).collect::<Vec<_>>(),
                    })
                })
                .collect();
        }
        v
    }
}

/// Summarise one trace file; reading stops once `cancel` is cancelled.
pub fn summarize_file(
    path: &Path,
    options: &SummaryOptions,
    cancel: &CancelToken,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Summary, Error> {
    let Some(default) = options.default_key else {
        let (mut kernels, _) = key::read_keyed(path, Some(&options.by), cancel, progress)?;
        options.hierarchy.apply(&mut kernels);
        return Ok(Summary::of_trace(path, &kernels, options));
    };
    let (mut kernels, by) = key::read_keyed(path, None, cancel, progress)?;
    let options = SummaryOptions {
        by: by.to_string(),
        hierarchy: key::hierarchy_for(by, options.hierarchy, default),
        ..options.clone()
    };
    options.hierarchy.apply(&mut kernels);
    Ok(Summary::of_trace(path, &kernels, &options))
}

/// Summarise `paths` on `jobs` threads (0: one per core): the merged summary of those
/// that could be read, and the error of each that could not.
pub fn summarize_files(
    paths: &[PathBuf],
    options: &SummaryOptions,
    jobs: usize,
    progress: &dyn FilesProgress,
    cancel: &CancelToken,
) -> (Summary, Vec<Error>) {
    let mut results = crate::files::many::read_files(paths, jobs, progress, |path, on_progress| {
        summarize_file(path, options, cancel, on_progress)
    });
    let mut summary = Summary {
        by: options.by.clone(),
        steps: options.steps,
        hierarchy: options.hierarchy,
        ..Summary::default()
    };
    if let Some(default) = options.default_key {
        // The first default key any trace carries; the others' kernels lack it.
        let read = || results.iter().filter_map(|r| r.as_ref().ok());
        if let Some(by) = read().map(|s| s.by.clone()).min_by_key(|by| key::rank_of_key(by)) {
            summary.by = by.clone();
            summary.hierarchy = key::hierarchy_for(&by, options.hierarchy, default);
            for s in results.iter_mut().filter_map(|r| r.as_mut().ok()) {
                if s.by != by {
                    *s = Summary { by: by.clone(), hierarchy: summary.hierarchy, ..std::mem::take(s) }
                        .without_values();
                }
            }
        }
    }
    let mut failures = Vec::new();
    for result in results {
        match result {
            Ok(s) => summary.merge(s),
            Err(error) => failures.push(error),
        }
    }
    (summary, failures)
}

#[cfg(test)]
mod tests;
