//! `cgfast annotate`.

use std::path::{Path, PathBuf};

use cgfast_core::annotations::file as annotation_file;
use cgfast_core::annotations::Annotations;
use cgfast_core::files::paths::{default_output, find_annotations};
use cgfast_core::passes::recover::Recover;
use cgfast_core::pipeline::{self, Options, Report};

use crate::progress::Progress;

#[derive(Clone, Copy, clap::ValueEnum)]
enum RecoverArg {
    /// Only for replays whose events carry no `graph node id`.
    Auto,
    Always,
    Never,
}

#[derive(clap::Args)]
pub struct Args {
    /// The profiler trace (.json or .json.gz; gzip is recognised by its content); or
    /// several, directories (searched for *.trace.json[.gz]) and glob patterns.
    #[arg(required = true, value_name = "TRACE")]
    pub(crate) traces: Vec<PathBuf>,
    /// Kernel annotations (.json, .json.gz or a PyTorch .pkl); found beside each trace when omitted.
    #[arg(short, long)]
    pub(crate) annotations: Option<PathBuf>,
    /// Where to write the result [default: <trace>.annotated.json[.gz]]; only for one trace.
    #[arg(short, long)]
    pub(crate) output: Option<PathBuf>,
    /// Traces annotated at once, with several [default: one per core].
    #[arg(short, long, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) jobs: Option<u32>,
    /// The lane of graphed events that no annotation puts elsewhere.
    #[arg(long, default_value_t = Options::DEFAULT_STREAM, allow_negative_numbers = true)]
    default_stream: i64,
    /// The lane that overlapping kernels of the default lane move to.
    #[arg(long, default_value_t = Options::OVERLAP_STREAM, allow_negative_numbers = true)]
    overlap_stream: i64,
    /// Largest overlap (µs) repaired as timestamp jitter; larger ones are only counted.
    #[arg(long, default_value_t = Options::MAX_ADJUST_US)]
    max_adjust_us: f64,
    /// Recover node ids from the recorded graph topology when the trace has none.
    #[arg(long, value_enum, default_value = "auto")]
    recover: RecoverArg,
    /// Add scope spans for this dotted annotation key (a gpu_user_annotation event per
    /// run of a replay's events on a lane sharing a prefix of its value); `none`: no spans.
    #[arg(long, default_value = cgfast_core::pipeline::DEFAULT_SPANS, value_name = "KEY")]
    spans: String,
    /// Move graphed events to the lanes their annotations name (`all`, keeping the lane
    /// they ran on as args.original_stream), or leave every lane as recorded (`none`,
    /// writing a named lane as args.annotated_stream), as torch 2.15's graph_lanes;
    /// `reference`: as `all` without original_stream (with `--spans none`, the output of
    /// the torch 2.13 reference and of cgfast before spans and lanes).
    #[arg(long, value_parser = ["all", "none", "reference"], default_value = "all")]
    lanes: String,
    /// Recover node ids by the recorded topology alone: ignore `cgfast.replay` stamps
    /// and leave replays that several graphs fit unannotated, even where all agree.
    #[arg(long)]
    topology_only: bool,
    /// gzip level of a .gz output (0-9).
    #[arg(long, default_value_t = Options::GZIP_LEVEL, value_parser = clap::value_parser!(u32).range(0..=9))]
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
    pub(crate) fn options(&self) -> Options {
        Options {
            default_stream: self.default_stream,
            overlap_stream: self.overlap_stream,
            max_adjust_us: self.max_adjust_us,
            recover: match self.recover {
                RecoverArg::Auto => Recover::Auto,
                RecoverArg::Always => Recover::Always,
                RecoverArg::Never => Recover::Never,
            },
            gzip_level: self.gzip_level,
            spans: (self.spans != "none").then(|| self.spans.clone()),
            topology_only: self.topology_only,
            lanes: cgfast_core::pipeline::Lanes::parse(&self.lanes).expect("clap checks the value"),
        }
    }

    /// Whether the flags make sense together, beyond what clap checks.
    pub(crate) fn check(&self) -> Result<(), String> {
        if !self.max_adjust_us.is_finite() || self.max_adjust_us < 0.0 {
            return Err(format!("--max-adjust-us must be a non-negative number, not {}", self.max_adjust_us));
        }
        if self.spans.is_empty() {
            return Err("--spans needs an annotation key, or none".into());
        }
        Ok(())
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
pub fn run(args: &Args, trace: PathBuf) -> Result<(), String> {
    let started = std::time::Instant::now();
    let (annotations_path, annotations) = load(&trace, args.annotations.as_deref())?;
    let output = args.output.clone().unwrap_or_else(|| default_output(&trace));
    let options = args.options();
    let input_len = std::fs::metadata(&trace).map(|m| m.len()).unwrap_or(0);
    let mut progress = Progress::new(input_len, !args.no_progress);
    let result =
        pipeline::annotate_file(&trace, &annotations, &output, &options, &mut |phase, done, total| {
            progress.update(phase, done, total)
        });
    progress.clear();
    let mut report = result.map_err(|f| f.message)?;
    report.seconds = started.elapsed().as_secs_f64();
    if args.json {
        println!("{}", report.to_json(Some(&annotations_path), args.verbose));
    } else {
        print_summary(&report, &annotations_path, args.verbose);
    }
    Ok(())
}

fn load(trace: &Path, explicit: Option<&Path>) -> Result<(PathBuf, Annotations), String> {
    let path = match explicit {
        Some(p) => p.to_path_buf(),
        None => find_annotations(trace, ANNOTATIONS_FLAG)?,
    };
    let annotations = annotation_file::read(&path)?;
    Ok((path, annotations))
}

/// How to name annotations that are not found.
pub(crate) const ANNOTATIONS_FLAG: &str = "use -a to name them";

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

fn print_summary(r: &Report, annotations: &Path, verbose: bool) {
    let line = |label: &str, value: String| println!("  {label:<18} {value}");
    println!("cgfast annotate {}", r.input.display());
    line("annotations", format!("{} nodes from {}", thousands(r.annotations_loaded), annotations.display()));
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
