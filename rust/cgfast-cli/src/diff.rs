//! `cgfast diff`: which values got slower or faster between two runs, and how sure.

use std::path::PathBuf;

use cgfast_core::{
    check_chart, diff_files, find_traces, signed_pct, summarize_files, throughput_changes, write_diff_chart,
    CancelToken, Diff, DiffOptions, Hierarchy, Offender, PeakOverride, SummaryOptions, ThroughputChange,
    Wanted,
};

use crate::files_progress::Files;
use crate::progress::LARGE_INPUT;
use crate::reading_args::{tree, Reading, RollUp};
use crate::{diff_table, diff_throughput, Failure};

/// The exit status when `--fail-if-slower` trips.
pub const SLOWER: i32 = 3;

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned columns, for reading.
    Table,
    /// One line per value (and per module path, and the total), with all the numbers.
    Csv,
    /// The whole report as one JSON object.
    Json,
}

/// A percentage: a finite number, at least 0.
fn percentage(text: &str) -> Result<f64, String> {
    let v: f64 = text.trim_end_matches('%').parse().map_err(|_| format!("not a percentage: {text}"))?;
    if v.is_finite() && v >= 0.0 {
        Ok(v)
    } else {
        Err(format!("not a percentage of 0 or more: {text}"))
    }
}

#[derive(clap::Args)]
#[command(after_help = "\
Each graph replay (the graphed kernels of one args.correlation of a trace) is one sample. \
A value's change is the Hodges-Lehmann estimate of the shift of its time per replay (the \
median of all test-minus-base differences between replays), with its distribution-free \
95% confidence interval from the Mann-Whitney U distribution (exact for small samples, \
normal approximation with a tie correction for large ones). A value is slower (faster) \
when the interval lies above (below) 0 and the change is at least --threshold of its \
base median and at least --min-change of the base's mean busy time per replay, same \
otherwise; new or gone when one side has none of its kernels. \
Replays of several graphs (a training step's forward and backward, say) are compared \
graph by graph, each graph's shift weighted by how often the value appears in its \
replays and the intervals combined as independent normal errors.

Runs: replays of one process share its memory placement, cuBLAS choices and clocks, so \
two runs of a program differ by more than their replays do. A run is a process: the \
traces of one (its profiling windows, named WORKER.NS.pt.trace.json by trace_handler \
and tensorboard_trace_handler, WORKER being [RANK.]HOST_PID) are one run, any other \
trace is a run of its own; pooled ranks are runs, and with --per-rank each rank's \
comparison has the runs of that rank. With 2 or more runs on each side, a value's \
change is the mean over its runs of each run's median time per replay, test minus \
base, and its 95% interval comes from a hierarchical bootstrap: 2,000 resamples, each \
drawing a side's runs with replacement and then each drawn run's replays with \
replacement (seeded: the same traces give the same report); the interval is the change \
plus or minus Student's t (Welch's degrees of freedom) times the resamples' standard \
error, each side's variance taken times k/(k-1) for resampling k runs from k. It holds \
the spread between runs as well as between replays, and the verdicts follow from it \
(a value in fewer than 2 runs of a side keeps the interval between replays). With one \
run on a side the intervals hold the spread between replays only; the table's runs \
line says so.

Exit status: 0 when the diff ran (and the gate passed), 1 on an error (nothing is \
written), 2 on a bad command line, 3 when --fail-if-slower trips (the report is printed \
and each offender named on stderr).")]
pub struct Args {
    /// The base run: an annotated trace (.json or .json.gz), a directory (searched for
    /// *.annotated.json[.gz]) or a glob pattern (quoted).
    #[arg(value_name = "BASE")]
    base: Option<PathBuf>,
    /// The run compared with the base, given the same way.
    #[arg(value_name = "TEST")]
    test: Option<PathBuf>,
    /// Another base input (repeat it): for sides of several traces one path does not name.
    #[arg(long = "base", value_name = "TRACE")]
    more_base: Vec<PathBuf>,
    /// Another test input (repeat it).
    #[arg(long = "test", value_name = "TRACE")]
    more_test: Vec<PathBuf>,
    /// The key kernels are grouped by: module, name, kernel (the kernel's own name) or
    /// any key of args [default: module where the traces carry it, else name, else kernel].
    #[arg(long, value_name = "KEY")]
    by: Option<String>,
    #[arg(long, value_enum, default_value = "table")]
    format: Format,
    /// Kernel lines shown under each value that changed (JSON and CSV have them all).
    #[arg(long, value_name = "N", default_value_t = 3)]
    top: usize,
    /// List the values that are the same too.
    #[arg(long)]
    all: bool,
    /// A change under this share of a value's base median is `same`, percent.
    #[arg(long, value_name = "PCT", default_value_t = DiffOptions::default().threshold * 100.0, value_parser = percentage)]
    threshold: f64,
    /// A change under this share of the base's mean busy time per replay is `same`,
    /// percent: a module left unchanged can move by a few GPU timer ticks when another
    /// changes (memory placement, cache), surely but not of its own doing (0: off).
    #[arg(long, value_name = "PCT", default_value_t = DiffOptions::default().min_change * 100.0, value_parser = percentage)]
    min_change: f64,
    /// Exit with status 3 when the busy time per replay, or a value with at least
    /// --min-share of the base's busy time, is slower by more than PCT percent with its
    /// 95% interval above 0.
    #[arg(long, value_name = "PCT", value_parser = percentage)]
    fail_if_slower: Option<f64>,
    /// Take every trace of a side as one run: intervals between replays only, and no
    /// word of runs (the output of cgfast before it told runs apart).
    #[arg(long)]
    pool_runs: bool,
    /// The share of the base's busy time, percent, a value needs for --fail-if-slower.
    #[arg(long, value_name = "PCT", default_value_t = DiffOptions::default().min_share * 100.0, value_parser = percentage)]
    min_share: f64,
    /// Also compare rank by rank (the rank from the trace's distributedInfo, else from the
    /// digits its file name starts with); without it, a side's ranks are pooled.
    #[arg(long)]
    per_rank: bool,
    /// Also write a chart: a .svg (the bars), or a .html page (the icicle for module
    /// paths, the bars and a table).
    #[arg(long, value_name = "FILE")]
    chart: Option<PathBuf>,
    #[command(flatten)]
    reading: Reading,
    #[command(flatten)]
    roll_up: RollUp,
    /// Compare every dotted path with the paths under it, and draw the icicle in the
    /// --chart (the default for module paths, --depth and --group-layers).
    #[arg(long)]
    hierarchy: bool,
    /// No paths compared as a hierarchy, no icicle.
    #[arg(long, conflicts_with = "hierarchy")]
    no_hierarchy: bool,
    /// Also compare each value's achieved throughput where the kernels of both sides carry
    /// FLOP or byte counts (args.flops, args.bytes, written at capture with flops=True):
    /// TFLOP/s and GB/s per side and their change, and the share of the GPU's peak, as
    /// summary --efficiency has them (a table after the diff's, the JSON report's
    /// throughput member, or, with --format csv, CSV lines of these figures instead).
    /// Reads each trace a second time.
    #[arg(long)]
    efficiency: bool,
}

/// Each side summarised by the diff's key and roll-up, their efficiency reports joined.
fn throughput_of(
    diff: &Diff,
    sides: [&[PathBuf]; 2],
    reading: &Reading,
    cancel: &CancelToken,
) -> Result<Vec<ThroughputChange>, Failure> {
    let hierarchy = Hierarchy::new(&diff.by, diff.options.depth, diff.options.group_layers, Some(false));
    let options = SummaryOptions { by: diff.by.clone(), steps: false, top: 0, hierarchy, default_key: None };
    let mut reports = Vec::with_capacity(2);
    for traces in sides {
        let progress = Files::new("reading counts", traces, !reading.no_progress, LARGE_INPUT);
        let (summary, mut failures) = summarize_files(traces, &options, reading.jobs(), &progress, cancel);
        progress.clear();
        if cancel.is_cancelled() {
            return Err(cgfast_core::Error::Cancelled.into());
        }
        if !failures.is_empty() {
            return Err(failures.remove(0).into());
        }
        reports.push(summary.efficiency(PeakOverride::default()));
    }
    Ok(throughput_changes(&reports[0], &reports[1]))
}

/// One line per offender of the gate.
fn offender_line(o: &Offender, limit: f64) -> String {
    let what = match &o.value {
        None => "the busy time per replay".to_string(),
        Some(v) => v.clone().unwrap_or_else(|| "(unannotated)".into()),
    };
    let rank = o.rank.map_or(String::new(), |r| format!("rank {r}: "));
    format!(
        "cgfast: slower: {rank}{what} {} (95% interval {} to {}), over the {}% gate",
        signed_pct(o.relative),
        signed_pct(o.relative_interval.0),
        signed_pct(o.relative_interval.1),
        limit
    )
}

pub fn run(args: Args, cancel: &CancelToken) -> Result<i32, Failure> {
    if args.by.as_deref() == Some("") {
        return Err(Failure::Said("--by needs a key of args (module, name, ...) or kernel".into()));
    }
    if let Some(chart) = &args.chart {
        check_chart(chart)?;
    }
    let base: Vec<PathBuf> = args.base.iter().chain(&args.more_base).cloned().collect();
    let test: Vec<PathBuf> = args.test.iter().chain(&args.more_test).cloned().collect();
    if base.is_empty() || test.is_empty() {
        return Err(Failure::Said(format!(
            "no {} traces: give BASE and TEST (or --base and --test)",
            if base.is_empty() { "base" } else { "test" }
        )));
    }
    let base = find_traces(&base, Wanted::Annotated)?;
    let test = find_traces(&test, Wanted::Annotated)?;
    let tree = tree(args.hierarchy, args.no_hierarchy);
    let options = DiffOptions {
        by: args.by.clone(),
        depth: args.roll_up.depth(),
        group_layers: args.roll_up.group_layers,
        tree,
        threshold: args.threshold / 100.0,
        min_change: args.min_change / 100.0,
        per_rank: args.per_rank,
        fail_if_slower: args.fail_if_slower.map(|p| p / 100.0),
        min_share: args.min_share / 100.0,
        pool_runs: args.pool_runs,
    };
    let all: Vec<PathBuf> = base.iter().chain(&test).cloned().collect();
    let progress = Files::new("reading", &all, !args.reading.no_progress, LARGE_INPUT);
    let result = diff_files(&base, &test, &options, args.reading.jobs(), &progress, cancel);
    progress.clear();
    let diff = result?;
    let throughput = if args.efficiency {
        Some(throughput_of(&diff, [&base, &test], &args.reading, cancel)?)
    } else {
        None
    };
    // The chart first: a run that cannot write it prints nothing.
    if let Some(path) = &args.chart {
        write_diff_chart(path, &diff)?;
    }
    match (args.format, &throughput) {
        (Format::Table, _) => {
            diff_table::print_table(&diff, args.top, args.all);
            if let Some(changes) = &throughput {
                diff_throughput::print_table(&diff.by, changes);
            }
        }
        (Format::Csv, Some(changes)) => diff_throughput::print_csv(changes),
        (Format::Csv, None) => diff_table::print_csv(&diff),
        (Format::Json, _) => {
            diff_table::print_json(&diff, throughput.as_deref().map(diff_throughput::to_json))
        }
    }
    if args.format != Format::Table {
        for note in diff.by_note.iter().chain(&diff.notes) {
            eprintln!("cgfast: note: {note}");
        }
    }
    let offenders: Vec<&Offender> = diff.offenders().collect();
    if let (Some(limit), false) = (args.fail_if_slower, offenders.is_empty()) {
        for o in offenders {
            eprintln!("{}", offender_line(o, limit));
        }
        return Ok(SLOWER);
    }
    Ok(0)
}
