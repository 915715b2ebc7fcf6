//! Base against test, value by value: each value's shift with its interval and verdict
//! (graph by graph where the traces replay several graphs), the dotted paths holding the
//! values, the kernels that changed inside each, and what trips the gate.

use std::collections::{BTreeMap, BTreeSet};

use super::bootstrap::{Bootstrap, MIN_RUNS};
use super::report::{relative, Comparison, DiffOptions, DiffRow, KernelChange, Offender, Verdict};
use super::samples::{by_run, median, merged, side_stats, Group, NameSums, Samples, Tables};
use crate::summary::diff_stats::{Shift, ShiftFinder, Z};

pub(super) struct Compare<'a> {
    pub(super) tables: &'a Tables,
    pub(super) options: &'a DiffOptions,
    /// Threads the rows are worked out on (0: one per core).
    pub(super) jobs: usize,
    /// Compare graph by graph, this many (the comparison at hand).
    pub(super) graphs: Option<u32>,
    /// A change under this many µs per replay is `same` (the comparison at hand).
    pub(super) floor_us: f64,
    /// Both sides have several runs (the comparison at hand): intervals between runs.
    pub(super) between_runs: bool,
}

/// What a thread works intervals out with: between replays, and between runs.
#[derive(Default)]
pub(super) struct Estimators {
    replays: ShiftFinder,
    runs: Bootstrap,
}

/// A row to work out: a value (by id), or a dotted path with the values under it.
pub(super) enum Job {
    Value(u32),
    Path(String, Vec<u32>),
}

/// A shift compared graph by graph, and each side's weighted median.
pub(super) struct ByGraph {
    pub(super) shift: Shift,
    pub(super) medians: (f64, f64),
}

/// The times of a value by graph, on each side.
type ByGraphTimes = (Vec<Vec<f64>>, Vec<Vec<f64>>);

impl Compare<'_> {
    /// Where the traces replay several graphs and the value is in the same ones (at
    /// least two) on both sides: those graphs, each weighted by the value's replays in
    /// it (both sides), and the times by graph. `None` where the value is compared all
    /// graphs together.
    fn graph_weights(
        &self,
        base: &Samples,
        test: &Samples,
        groups: (&Group, &Group),
    ) -> Option<(Vec<(u32, f64)>, ByGraphTimes)> {
        let graphs = self.graphs? as usize;
        let split = |s: &Samples, g: &Group| {
            let mut by: Vec<Vec<f64>> = vec![Vec::new(); graphs];
            for (&r, &us) in s.replay.iter().zip(&s.us) {
                by[g.graph[r as usize] as usize].push(us);
            }
            by
        };
        let (xs, ys) = (split(base, groups.0), split(test, groups.1));
        if xs.iter().zip(&ys).any(|(x, y)| x.is_empty() != y.is_empty()) {
            return None;
        }
        let present: Vec<usize> = (0..graphs).filter(|&k| !xs[k].is_empty()).collect();
        if present.len() < 2 {
            return None;
        }
        let total: usize = present.iter().map(|&k| xs[k].len() + ys[k].len()).sum();
        let weights =
            present.iter().map(|&k| (k as u32, (xs[k].len() + ys[k].len()) as f64 / total as f64)).collect();
        Some((weights, (xs, ys)))
    }

    /// The shift of `test` against `base` graph by graph (`weighted`, from
    /// [`graph_weights`](Self::graph_weights)): each graph's Hodges-Lehmann shift,
    /// weighted, and an interval from each graph's, taken as independent normal errors
    /// (`σ = (high - low) / 2z`).
    fn by_graph(finder: &mut ShiftFinder, weighted: (&[(u32, f64)], &mut ByGraphTimes)) -> ByGraph {
        let (weights, (xs, ys)) = weighted;
        let (mut estimate, mut variance, mut medians) = (0.0, 0.0, (0.0, 0.0));
        for &(k, w) in weights {
            let k = k as usize;
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
        ByGraph { shift: Shift { estimate, low, high }, medians }
    }

    pub(super) fn row(
        &self,
        estimators: &mut Estimators,
        value: Option<String>,
        base: Option<&Samples>,
        test: Option<&Samples>,
        groups: (&Group, &Group),
    ) -> DiffRow {
        let mut weighted = match (base, test) {
            (Some(b), Some(t)) => self.graph_weights(b, t, groups),
            _ => None,
        };
        let graphs: Option<Vec<u32>> = weighted.as_ref().map(|(w, _)| w.iter().map(|&(g, _)| g).collect());
        let runs = |s: Option<&Samples>, g: &Group| s.map_or(Vec::new(), |s| by_run(s, g, graphs.as_deref()));
        let (base_runs, test_runs) =
            if self.between_runs { (runs(base, groups.0), runs(test, groups.1)) } else { Default::default() };
        let weights: Vec<f64> =
            weighted.as_ref().map_or(vec![1.0], |(w, _)| w.iter().map(|&(_, w)| w).collect());
        // (shift, each side's time per replay where it is not the plain median)
        let (shift, medians) = match (base, test) {
            (Some(b), Some(t)) => {
                if let Some(r) = estimators.runs.shift(&base_runs, &test_runs, &weights) {
                    (Some(r.shift), Some(r.locations))
                } else if let Some((w, times)) = weighted.as_mut() {
                    let g = Self::by_graph(&mut estimators.replays, (w.as_slice(), times));
                    (Some(g.shift), Some(g.medians))
                } else {
                    (estimators.replays.shift(&mut b.us.clone(), &mut t.us.clone()), None)
                }
            }
            _ => (None, None),
        };
        let b = base.map(|s| side_stats(s, groups.0, medians.map(|m| m.0)));
        let t = test.map(|s| side_stats(s, groups.1, medians.map(|m| m.1)));
        let verdict = match (&b, &t, shift) {
            (None, _, _) => Verdict::New,
            (_, None, _) => Verdict::Gone,
            (Some(b), Some(_), Some(s)) => {
                let change = relative(s.estimate, b.median_us);
                let material = s.estimate.abs() >= self.floor_us;
                if s.low > 0.0 && change >= self.options.threshold && material {
                    Verdict::Slower
                } else if s.high < 0.0 && change <= -self.options.threshold && material {
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
            by_graph: weighted.is_some(),
            runs: self.between_runs.then_some((base_runs.len(), test_runs.len())),
            kernels: Vec::new(),
        }
    }

    pub(super) fn kernels(
        &self,
        value: u32,
        base: &Group,
        test: &Group,
        replays: (usize, usize),
    ) -> Vec<KernelChange> {
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

    pub(super) fn compare(
        &mut self,
        rank: Option<u64>,
        base: &Group,
        test: &Group,
        tree: bool,
    ) -> Comparison {
        let groups = (base, test);
        let counts: BTreeSet<u32> =
            base.graphs_per_trace.iter().chain(&test.graphs_per_trace).copied().collect();
        let graphs = (counts.len() == 1).then(|| *counts.first().expect("one"));
        self.graphs = graphs.filter(|&g| g > 1);
        self.floor_us = self.options.min_change * mean(base);
        self.between_runs = base.info().runs >= MIN_RUNS && test.info().runs >= MIN_RUNS;
        let all = |g: &Group| Samples {
            replay: (0..g.busy_us.len() as u32).collect(),
            us: g.busy_us.clone(),
            kernels: g.kernels.clone(),
        };
        let mut total =
            self.row(&mut Estimators::default(), None, Some(&all(base)), Some(&all(test)), groups);
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
    pub(super) fn paths(&self) -> Vec<(String, Vec<u32>)> {
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

    /// The rows of `jobs`, in order, worked out on up to `jobs` threads (estimators each);
    /// a path with no replay on either side has none.
    pub(super) fn rows(&self, jobs: &[Job], groups: (&Group, &Group)) -> Vec<Option<DiffRow>> {
        let threads = crate::files::many::threads(self.jobs).min(jobs.len()).max(1);
        let mut out: Vec<Option<DiffRow>> = (0..jobs.len()).map(|_| None).collect();
        std::thread::scope(|scope| {
            let workers: Vec<_> = (0..threads)
                .map(|first| {
                    scope.spawn(move || {
                        let mut estimators = Estimators::default();
                        (first..jobs.len())
                            .step_by(threads)
                            .map(|i| (i, self.job_row(&mut estimators, &jobs[i], groups)))
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

    pub(super) fn job_row(
        &self,
        estimators: &mut Estimators,
        job: &Job,
        groups: (&Group, &Group),
    ) -> Option<DiffRow> {
        let (base, test) = groups;
        match job {
            Job::Value(id) => {
                let (b, t) = (base.samples(*id), test.samples(*id));
                let mut row = self.row(estimators, self.tables.values[*id as usize].clone(), b, t, groups);
                let replays = (b.map_or(0, |s| s.us.len()), t.map_or(0, |s| s.us.len()));
                row.kernels = self.kernels(*id, base, test, replays);
                Some(row)
            }
            Job::Path(path, ids) => {
                let (b, t) = (merged(base, ids), merged(test, ids));
                if b.is_none() && t.is_none() {
                    return None;
                }
                Some(self.row(estimators, Some(path.clone()), b.as_ref(), t.as_ref(), groups))
            }
        }
    }
}

/// A path segment: named ones in their order, then numbered ones by number (as the
/// icicle puts numbered layers in their order).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Segment {
    pub(super) number: Option<u64>,
    pub(super) text: String,
}

impl Segment {
    pub(super) fn of(text: &str) -> Segment {
        let digits = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
        Segment { number: if digits { text.parse().ok() } else { None }, text: text.to_string() }
    }
}

pub(super) fn offenders(c: &Comparison, limit: f64, min_share: f64) -> Vec<Offender> {
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

/// The mean busy time per replay of a side.
fn mean(g: &Group) -> f64 {
    g.busy_us.iter().sum::<f64>() / g.busy_us.len().max(1) as f64
}
