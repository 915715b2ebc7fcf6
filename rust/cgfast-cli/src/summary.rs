//! `cgfast summary`: where the GPU time of graph replays goes, per annotation value.

use std::path::PathBuf;

use cgfast_core::{
    check_chart, find_traces, summarize_files, write_chart, CancelToken, DefaultKey, Hierarchy, PeakOverride,
    SummaryOptions, Wanted, MODULE_KEY,
};

use crate::files_progress::Files;
use crate::progress::LARGE_INPUT;
use crate::reading_args::{tree, Reading, RollUp};
use crate::{summary_table, Failure};

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Format {
    /// Aligned columns, for reading.
    Table,
    /// One line per value (with --steps: per value and replay).
    Csv,
    /// The whole report as one JSON object.
    Json,
}

#[derive(clap::Args)]
pub struct Args {
    /// Annotated traces (.json or .json.gz), directories (searched for
    /// *.annotated.json[.gz]) or glob patterns; several are added up.
    #[arg(required = true, value_name = "TRACE")]
    traces: Vec<PathBuf>,
    /// The key kernels are grouped by: module, name, kernel (the kernel's own name) or any
    /// key the annotations wrote [default: module where the traces carry it, else name,
    /// else kernel]. By launch, a line's backward kernels (launch_phase) have a row of their
    /// own, "LINE [backward]".
    #[arg(long, value_name = "KEY")]
    by: Option<String>,
    #[arg(long, value_enum, default_value = "table")]
    format: Format,
    /// Also per replay (per args.correlation), with the spread of each value across replays.
    #[arg(long)]
    steps: bool,
    /// Kernel names listed for each value.
    #[arg(long, value_name = "N", default_value_t = SummaryOptions::default().top)]
    top: usize,
    /// Also write a chart: a .svg, or a .html page with the chart and the table.
    #[arg(long, value_name = "FILE")]
    chart: Option<PathBuf>,
    #[command(flatten)]
    reading: Reading,
    #[command(flatten)]
    roll_up: RollUp,
    /// Draw the values' hierarchy as an icicle in the --chart (the default with --by
    /// module, --depth and --group-layers).
    #[arg(long)]
    hierarchy: bool,
    /// Never draw the icicle: the --chart has the bars only.
    #[arg(long, conflicts_with = "hierarchy")]
    no_hierarchy: bool,
    /// Also how close each value comes to the GPU's roofline, from the FLOP and byte
    /// counts its kernels carry (args.flops, args.bytes): FLOPs and bytes per replay,
    /// achieved TFLOP/s and GB/s, the roofline bound, the share of peak and the time above
    /// the roofline, most of it first. Peaks are those of the GPU the trace records
    /// (deviceProperties), per args.dtype (bf16 where none is given). With --format csv,
    /// a line per value of these figures; with --chart out.html, a roofline chart too.
    #[arg(long)]
    efficiency: bool,
    /// The FLOP peak for --efficiency, in TFLOP/s, for every dtype (instead of the GPU's).
    #[arg(long, value_name = "TFLOPS", requires = "efficiency", value_parser = positive)]
    peak_tflops: Option<f64>,
    /// The memory bandwidth peak for --efficiency, in GB/s (instead of the GPU's).
    #[arg(long, value_name = "GBPS", requires = "efficiency", value_parser = positive)]
    peak_gbps: Option<f64>,
}

fn positive(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        _ => Err("a number above 0".into()),
    }
}

pub fn run(args: Args, cancel: &CancelToken) -> Result<(), Failure> {
    let said = |line: String| Err(Failure::Said(line));
    if args.by.as_deref() == Some("") {
        return said("--by needs a key of args (name, module, ...)".into());
    }
    if let Some(chart) = &args.chart {
        check_chart(chart)?;
    }
    if args.hierarchy && args.chart.is_none() {
        return said("--hierarchy draws the hierarchy in a chart: give --chart out.html (or .svg)".into());
    }
    let tree = tree(args.hierarchy, args.no_hierarchy);
    let by = args.by.clone().unwrap_or_else(|| MODULE_KEY.to_string());
    let hierarchy = Hierarchy::new(&by, args.roll_up.depth(), args.roll_up.group_layers, tree);
    let traces = find_traces(&args.traces, Wanted::Annotated)?;
    let default_key = args.by.is_none().then_some(DefaultKey { tree });
    let options = SummaryOptions { by, steps: args.steps, top: args.top, hierarchy, default_key };
    let progress = Files::new("reading", &traces, !args.reading.no_progress, LARGE_INPUT);
    let (summary, mut failures) = summarize_files(&traces, &options, args.reading.jobs(), &progress, cancel);
    progress.clear();
    if traces.len() == 1 && failures.len() == 1 {
        return Err(failures.remove(0).into());
    }
    if cancel.is_cancelled() {
        return Err(cgfast_core::Error::Cancelled.into());
    }
    for failure in &failures {
        eprintln!("cgfast: failed: {failure}");
    }
    if summary.traces.is_empty() {
        return said(format!("none of the {} traces could be read", failures.len()));
    }
    if summary.totals().kernels == 0 {
        eprintln!("cgfast: note: no graphed kernels (work with a graph node id other than 0); summary reads the outputs of cgfast annotate");
    }
    let rows = summary.rows(args.top);
    let efficiency = args
        .efficiency
        .then(|| summary.efficiency(PeakOverride { tflops: args.peak_tflops, gbps: args.peak_gbps }));
    match args.format {
        Format::Table => {
            let note = if args.by.is_none() { cgfast_core::default_key_note(&summary.by) } else { None };
            summary_table::print_table(&summary, &rows, note.as_deref());
            if let Some(e) = &efficiency {
                summary_table::print_efficiency(&summary, e);
            }
        }
        Format::Csv => match &efficiency {
            Some(e) => {
                for note in &e.notes {
                    eprintln!("cgfast: note: {note}");
                }
                summary_table::print_efficiency_csv(e)
            }
            None => summary_table::print_csv(&summary, &rows),
        },
        Format::Json => summary_table::print_json(&summary, args.top, efficiency.as_ref()),
    }
    if let Some(path) = &args.chart {
        write_chart(path, &summary, &rows, efficiency.as_ref())?;
    }
    if failures.is_empty() {
        Ok(())
    } else {
        said(format!("{} of {} traces could not be read", failures.len(), traces.len()))
    }
}
