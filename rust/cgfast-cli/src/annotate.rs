//! `cgfast annotate`.

use std::path::PathBuf;

use clap::builder::{PossibleValuesParser, TypedValueParser};

use cgfast_core::{
    annotate_file, default_output, find_annotations, read_annotations, CancelToken, Lanes, Options, Pairing,
    Recover, Report,
};

use crate::progress::Progress;
use crate::Failure;

#[derive(clap::Args)]
pub struct Args {
    /// The profiler trace (.json or .json.gz; gzip is recognised by its content); or
    /// several, directories (searched for *.trace.json[.gz], and for the traces that the
    /// annotation files in them list, wherever those are) and glob patterns.
    #[arg(required = true, value_name = "TRACE")]
    pub(crate) traces: Vec<PathBuf>,
    /// Kernel annotations (.json, .json.gz or a PyTorch .pkl), or a directory of them
    /// (each trace gets the file there that lists it, else its rank's); found beside each
    /// trace when omitted.
    #[arg(short, long)]
    pub(crate) annotations: Option<PathBuf>,
    /// Where to write the result [default: <trace>.annotated.json[.gz]]; only for one trace.
    #[arg(short, long)]
    pub(crate) output: Option<PathBuf>,
    /// Traces annotated at once, with several [default: one per core].
    #[arg(short, long, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) jobs: Option<u32>,
    /// The lane of graphed events that no annotation puts elsewhere.
    #[arg(long, default_value_t = Options::default().default_stream, allow_negative_numbers = true)]
    default_stream: i64,
    /// The lane that overlapping kernels of the default lane move to.
    #[arg(long, default_value_t = Options::default().overlap_stream, allow_negative_numbers = true)]
    overlap_stream: i64,
    /// Largest overlap (µs) repaired as timestamp jitter; larger ones are only counted.
    #[arg(long, default_value_t = Options::default().max_adjust_us)]
    max_adjust_us: f64,
    /// Recover node ids from the recorded graph topology when the trace has none (auto:
    /// only for replays whose events carry no `graph node id`).
    #[arg(
        long,
        default_value_t = Options::default().recover,
        value_parser = PossibleValuesParser::new(Recover::NAMES).map(|name| name.parse::<Recover>().expect("a name")),
    )]
    recover: Recover,
    /// Add scope spans for this dotted annotation key (a gpu_user_annotation event per
    /// run of a replay's events on a lane sharing a prefix of its value); `none`: no spans.
    #[arg(long, default_value_t = Options::default().spans.to_string(), value_name = "KEY")]
    spans: String,
    /// Move graphed events to the lanes their annotations name (`all`, keeping the lane
    /// they ran on as args.original_stream), or leave every lane as recorded (`none`,
    /// writing a named lane as args.annotated_stream), as torch 2.15's graph_lanes;
    /// `reference`: as `all` without original_stream (with `--spans none`, the output of
    /// the torch 2.13 reference and of cgfast before spans and lanes).
    #[arg(
        long,
        default_value_t = Options::default().lanes,
        value_parser = PossibleValuesParser::new(Lanes::NAMES).map(|name| name.parse::<Lanes>().expect("a name")),
    )]
    lanes: Lanes,
    /// Recover node ids by the recorded topology alone: ignore `cgfast.replay` stamps
    /// and leave replays that several graphs fit unannotated, even where all agree.
    #[arg(long)]
    topology_only: bool,
    /// gzip level of a .gz output (0-9).
    #[arg(long, default_value_t = Options::default().gzip_level, value_parser = clap::value_parser!(u32).range(0..=9))]
    gzip_level: u32,
    /// Print the summary as one JSON object.
    #[arg(long)]
    pub(crate) json: bool,
    /// List every large overlap (with several traces: a line per trace).
    #[arg(short, long)]
    pub(crate) verbose: bool,
    /// Never show a progress bar.
    #[arg(long)]
    pub(crate) no_progress: bool,
}

impl Args {
    /// The options the flags give, checked by the core, with the switches the
    /// environment sets.
    pub(crate) fn options(&self) -> Result<Options, Failure> {
        let mut options = Options::default();
        options.default_stream = self.default_stream;
        options.overlap_stream = self.overlap_stream;
        options.max_adjust_us = self.max_adjust_us;
        options.recover = self.recover;
        options.spans = self.spans.parse()?;
        options.lanes = self.lanes;
        options.topology_only = self.topology_only;
        options.gzip_level = self.gzip_level;
        options.check()?;
        Ok(options.with_environment())
    }

    /// The one trace to annotate as before, unless several (or a directory or a
    /// pattern) are given.
    pub(crate) fn single_trace(&self) -> Option<PathBuf> {
        match self.traces.as_slice() {
            [one]
                if one.is_file()
                    || !(one.is_dir() || one.to_str().is_some_and(|t| t.contains(['*', '?', '[']))) =>
            {
                Some(one.clone())
            }
            _ => None,
        }
    }
}

/// Annotate the one `trace` (see [`Args::single_trace`]).
pub fn run(args: &Args, trace: PathBuf, cancel: &CancelToken) -> Result<(), Failure> {
    let options = args.options()?;
    let started = std::time::Instant::now();
    let annotations = match &args.annotations {
        Some(dir) if dir.is_dir() => {
            read_annotations(&Pairing::in_directory(dir)?.annotations_of(&trace, ANNOTATIONS_FILE_FLAG)?)?
        }
        Some(path) => read_annotations(path)?,
        None => read_annotations(&find_annotations(&trace, ANNOTATIONS_FLAG)?)?,
    };
    let output = args.output.clone().unwrap_or_else(|| default_output(&trace));
    let input_len = std::fs::metadata(&trace).map(|m| m.len()).unwrap_or(0);
    let mut progress = Progress::new(input_len, !args.no_progress);
    let result = annotate_file(&trace, &annotations, &output, &options, cancel, &mut |phase, done, total| {
        progress.update(phase, done, total)
    });
    progress.clear();
    let mut report = result?;
    report.seconds = started.elapsed().as_secs_f64();
    if args.json {
        println!("{}", report.to_json(args.verbose));
    } else {
        print_summary(&report, args.verbose);
    }
    warn_of_invalid_utf8(&report);
    Ok(())
}

/// One line on stderr for a trace whose strings hold invalid UTF-8 (copied through).
pub(crate) fn warn_of_invalid_utf8(report: &Report) {
    if report.invalid_utf8 > 0 {
        let first = report.invalid_utf8_at.map(|at| format!(", the first at byte {at}")).unwrap_or_default();
        eprintln!(
            "cgfast: warning: {}: {} invalid UTF-8 sequence{} in its strings{first}, copied through as {}",
            report.input.display(),
            thousands(report.invalid_utf8),
            if report.invalid_utf8 == 1 { "" } else { "s" },
            if report.invalid_utf8 == 1 { "it is" } else { "they are" },
        );
    }
}

/// How to name annotations that are not found.
pub(crate) const ANNOTATIONS_FLAG: &str = "use -a to name them";
/// How to name the annotations of a trace that `-a DIR` has none for.
pub(crate) const ANNOTATIONS_FILE_FLAG: &str = "use -a FILE to name its annotations";

pub(crate) fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn print_summary(r: &Report, verbose: bool) {
    let line = |label: &str, value: String| println!("  {label:<18} {value}");
    println!("cgfast annotate {}", r.input.display());
    let from = r.annotations.as_deref().map(|p| p.display().to_string()).unwrap_or_default();
    line("annotations", format!("{} nodes from {from}", thousands(r.annotations_loaded)));
    line("events", thousands(r.events));
    let rec = &r.recovery;
    if rec.replays > 0 {
        if rec.no_topology {
            line(
                "node ids",
                format!(
                    "missing in {} replays, and the annotations record no graph topology to recover them",
                    thousands(rec.replays)
                ),
            );
        } else {
            line(
                "recovered ids",
                format!(
                    "{} events in {} of {} replays; left without an id: {} ambiguous replays ({} events), {} unmatched ({} events)",
                    thousands(rec.recovered_events),
                    thousands(rec.recovered_replays),
                    thousands(rec.replays),
                    thousands(rec.ambiguous_replays),
                    thousands(rec.ambiguous_events),
                    thousands(rec.unmatched_replays),
                    thousands(rec.unmatched_events)
                ),
            );
        }
    }
    if rec.stamped_replays
        + rec.equivalent_replays
        + rec.unknown_stamps
        + rec.unfit_stamps
        + rec.malformed_stamps
        > 0
    {
        line(
            "exact replays",
            format!(
                "{} stamped, {} equivalent; stamps not trusted: {} of an unknown graph, {} unfit, {} malformed",
                thousands(rec.stamped_replays),
                thousands(rec.equivalent_replays),
                thousands(rec.unknown_stamps),
                thousands(rec.unfit_stamps),
                thousands(rec.malformed_stamps)
            ),
        );
    }
    line("annotated", thousands(r.annotated));
    line("noise removed", thousands(r.noise_removed));
    line("moved", format!("{} overlapping kernels to their own lane", thousands(r.moved)));
    line("fixed", format!("{} timestamps", thousands(r.fixed)));
    if r.large_overlaps() > 0 {
        let hint = if verbose { "" } else { "; --verbose lists them" };
        line(
            "large overlaps",
            format!(
                "{} left as they are (largest {:.3} µs{hint})",
                thousands(r.large_overlaps()),
                r.largest_overlap_us
            ),
        );
        if verbose {
            for o in &r.overlaps {
                println!(
                    "    lane {:>4}  ts {:.3}  overlap {:.3} µs  {}",
                    o.lane,
                    o.ts,
                    o.overlap_us,
                    o.name.chars().take(80).collect::<String>()
                );
            }
        }
    }
    line("output", r.output.display().to_string());
    line("time", format!("{:.2} s ({:.1} MB/s)", r.seconds, r.mb_per_s()));
}
