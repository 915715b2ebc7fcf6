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
//! lies above (below) 0 and the estimate is at least the threshold of its base median
//! and at least `min_change` of the base's mean busy time per replay, `same` otherwise,
//! `new` or `gone` when one side has none of its kernels.
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

mod bootstrap;
mod compare;
mod distributions;
mod report;
mod runs;
mod samples;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use super::key::{self, KERNEL_KEY};
use crate::files::many::FilesProgress;
use crate::{CancelToken, Error};
pub use bootstrap::{MIN_RUNS, RESAMPLES};
use compare::Compare;
pub use report::{
    Comparison, Diff, DiffOptions, DiffRow, KernelChange, Offender, SideInfo, SideStats, TraceInfo, Verdict,
};
use samples::{read_trace, Group, Tables, TraceReplays};

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
    let results = crate::files::many::read_files(&paths, jobs, progress, |path, on_progress| {
        read_trace(path, options, cancel, on_progress)
    });
    let mut read = Vec::with_capacity(results.len());
    let mut failures = Vec::new();
    for result in results {
        match result {
            Ok(t) => read.push(t),
            Err(error) => failures.push(error),
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
        let paths: Vec<&std::path::Path> = traces.iter().map(|t| t.info.path.as_path()).collect();
        let runs = if options.pool_runs { vec![0; paths.len()] } else { runs::runs_of(&paths) };
        for (t, run) in traces.iter().zip(runs) {
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
            pooled.add(t, run, &ids, &names, collapse);
            if let (true, Some(rank)) = (options.per_rank, t.info.rank) {
                ranks.entry(rank).or_default().add(t, run, &ids, &names, collapse);
            }
        }
    }
    // Values of no replay (their kernels had no correlation) would have no row: keep the
    // tables as they are, rows skip values without samples.
    let [(base_pooled, base_ranks), (test_pooled, test_ranks)] = &sides;
    let mut compare =
        Compare { tables: &tables, options, jobs, graphs: None, floor_us: 0.0, between_runs: false };
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
