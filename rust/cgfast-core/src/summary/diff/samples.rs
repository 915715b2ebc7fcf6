//! Each side's samples: a trace reduced, on the thread that read it, to per-(value,
//! replay) sums, and the replays of a side (pooled, or one rank) gathered from them.

use std::collections::BTreeMap;
use std::path::Path;

use rustc_hash::FxHashMap as HashMap;

use super::bootstrap::Run;
use super::report::{DiffOptions, SideInfo, SideStats, TraceInfo};
use crate::index::keys::Strings;
use crate::summary::key;
use crate::summary::read::{Kernels, NONE};
use crate::summary::time::{attribute, Spread};
use crate::summary::{busy, intervals, runs};
use crate::{CancelToken, Error};

/// One replay of a trace: its graph, busy time, kernels and cells (`cells[start..start + len]`).
pub(super) struct ReplaySums {
    /// Which of the trace's graphs, in the order of their first replay.
    pub(super) graph: u32,
    pub(super) busy_ns: i64,
    pub(super) kernels: u32,
    pub(super) start: u32,
    pub(super) len: u32,
}

/// A value in a replay.
pub(super) struct Cell {
    pub(super) value: u32,
    pub(super) kernels: u32,
    pub(super) attributed_ns: f64,
}

/// A trace reduced to per-(value, replay) sums on the thread that read it.
pub(super) struct TraceReplays {
    pub(super) info: TraceInfo,
    /// The key it was grouped by ("" for a key asked for).
    pub(super) key: &'static str,
    pub(super) carries: bool,
    /// Local value ids: `values.len()` stands for kernels without the key.
    pub(super) values: Vec<String>,
    pub(super) replays: Vec<ReplaySums>,
    /// Distinct graphs replayed.
    pub(super) graphs: u32,
    pub(super) cells: Vec<Cell>,
    /// (local value, kernel name, kernels, Σ dur ns) over its replays.
    pub(super) names: Vec<(u32, String, u64, i64)>,
}

pub(super) fn reduce(path: &Path, k: &Kernels, key: &'static str) -> TraceReplays {
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

pub(super) fn read_trace(
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

/// Kernels of a name and their Σ dur (ns).
pub(super) type NameSums = (u64, i64);

/// A value's samples: the replays (of its group) it appears in, its time and kernels there.
#[derive(Default)]
pub(super) struct Samples {
    pub(super) replay: Vec<u32>,
    pub(super) us: Vec<f64>,
    pub(super) kernels: Vec<u32>,
}

/// The replays of one side (pooled, or one rank).
#[derive(Default)]
pub(super) struct Group {
    pub(super) traces: usize,
    /// The graphs each trace replays.
    pub(super) graphs_per_trace: Vec<u32>,
    /// Per replay: its run (the side's numbering, [`runs_of`](super::runs::runs_of)),
    /// graph (its trace's numbering), busy time, kernels.
    pub(super) run: Vec<u32>,
    pub(super) graph: Vec<u32>,
    pub(super) busy_us: Vec<f64>,
    pub(super) kernels: Vec<u32>,
    /// By global value id.
    pub(super) values: Vec<Samples>,
    /// (global value, global name) -> its kernels.
    pub(super) names: HashMap<(u32, u32), NameSums>,
}

/// Global ids of values (`None`: without the key) and kernel names.
#[derive(Default)]
pub(super) struct Tables {
    pub(super) value_ids: HashMap<Option<String>, u32>,
    pub(super) values: Vec<Option<String>>,
    pub(super) names: Strings,
}

impl Tables {
    pub(super) fn value(&mut self, value: Option<&str>) -> u32 {
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
    /// Add a trace's replays, of `run`; `collapse`: its kernels count as without the key.
    pub(super) fn add(&mut self, t: &TraceReplays, run: u32, ids: &[u32], names: &[u32], collapse: bool) {
        self.traces += 1;
        self.graphs_per_trace.push(t.graphs);
        let mut merged: Vec<(u32, u32, f64)> = Vec::new();
        for r in &t.replays {
            let replay = self.busy_us.len() as u32;
            self.run.push(run);
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

    pub(super) fn samples(&self, value: u32) -> Option<&Samples> {
        self.values.get(value as usize).filter(|s| !s.us.is_empty())
    }

    pub(super) fn info(&self) -> SideInfo {
        let mut runs = self.run.clone();
        runs.sort_unstable();
        runs.dedup();
        SideInfo {
            traces: self.traces,
            runs: runs.len(),
            replays: self.busy_us.len(),
            kernels: self.kernels.iter().map(|&k| k as u64).sum(),
        }
    }
}

pub(super) fn median(values: &mut [f64]) -> f64 {
    Spread::of(values).median
}

pub(super) fn side_stats(s: &Samples, group: &Group, median_us: Option<f64>) -> SideStats {
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

/// The times of `s` by run (in the order of their numbers), each run's by graph slot:
/// one slot per graph of `graphs` (replays of other graphs left out), or one slot for all.
pub(super) fn by_run(s: &Samples, group: &Group, graphs: Option<&[u32]>) -> Vec<Run> {
    let slots = graphs.map_or(1, <[u32]>::len);
    let mut runs: BTreeMap<u32, Run> = BTreeMap::new();
    for (&r, &us) in s.replay.iter().zip(&s.us) {
        let slot = match graphs {
            None => 0,
            Some(graphs) => match graphs.iter().position(|&g| g == group.graph[r as usize]) {
                Some(slot) => slot,
                None => continue,
            },
        };
        runs.entry(group.run[r as usize]).or_insert_with(|| vec![Vec::new(); slots])[slot].push(us);
    }
    let mut runs: Vec<Run> = runs.into_values().collect();
    for times in runs.iter_mut().flatten() {
        times.sort_unstable_by(f64::total_cmp);
    }
    runs
}

/// The samples of all of `ids` together: per replay, their times and kernels summed.
pub(super) fn merged(group: &Group, ids: &[u32]) -> Option<Samples> {
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
