//! `cgfast annotate` of several traces: every trace the inputs name (with those that
//! the annotation files of a directory among them list), on all cores, each written
//! beside its input; a failure is reported and the others go on.

use std::path::{Path, PathBuf};

use cgfast_core::{
    annotate_files, find_paired_traces, find_traces, read_annotations, Annotations, AnnotationsOf,
    CancelToken, Pairing, Report, Wanted,
};

use crate::annotate::{thousands, warn_of_invalid_utf8, Args, ANNOTATIONS_FILE_FLAG, ANNOTATIONS_FLAG};
use crate::files_progress::Files;
use crate::Failure;

/// A failure as one line that names the trace (once).
fn failure_line(trace: &Path, message: &str) -> String {
    let shown = trace.display().to_string();
    if message.contains(&shown) {
        message.to_string()
    } else {
        format!("{shown}: {message}")
    }
}

pub fn run(args: &Args, cancel: &CancelToken) -> Result<(), Failure> {
    if args.output.is_some() {
        return Err(Failure::Said(
            "-o/--output names the output of one trace; with several, each is written beside its input"
                .into(),
        ));
    }
    let options = args.options()?;
    let started = std::time::Instant::now();
    let (traces, named) = match &args.annotations {
        None => {
            let (traces, pairing) = find_paired_traces(&args.traces)?;
            (traces, Named::ByDirectoriesGiven(pairing))
        }
        Some(dir) if dir.is_dir() => {
            let traces = find_traces(&args.traces, Wanted::Traces)?;
            (traces, Named::InDirectory(Pairing::in_directory(dir)?))
        }
        Some(file) => {
            let traces = find_traces(&args.traces, Wanted::Traces)?;
            (traces, Named::File(read_annotations(file)?))
        }
    };
    let annotations = match &named {
        Named::ByDirectoriesGiven(pairing) => AnnotationsOf::Paired { pairing, hint: ANNOTATIONS_FLAG },
        Named::InDirectory(pairing) => AnnotationsOf::Paired { pairing, hint: ANNOTATIONS_FILE_FLAG },
        Named::File(annotations) => AnnotationsOf::All(annotations),
    };
    let progress = Files::new("annotating", &traces, !args.no_progress, 0);
    let jobs = match args.jobs {
        Some(jobs) => jobs as usize,
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    }
    .min(traces.len().max(1));
    let results =
        annotate_files(&traces, annotations, &options, jobs, cancel, &progress, &mut |i, result| {
            if args.verbose && !args.json {
                progress.clear();
                match result {
                    Ok(report) => println!(
                        "  ok      {}  ({} annotated, {:.2} s)",
                        traces[i].display(),
                        thousands(report.annotated),
                        report.seconds
                    ),
                    Err(e) => println!("  failed  {}", failure_line(&traces[i], &e.to_string())),
                }
            }
        });
    progress.clear();
    if cancel.is_cancelled() {
        return Err(Failure::Core(cgfast_core::Error::Cancelled));
    }
    let seconds = started.elapsed().as_secs_f64();
    let mut done = Vec::new();
    let mut failed = Vec::new();
    for (trace, result) in traces.iter().zip(results) {
        match result {
            Ok(report) => done.push(report),
            Err(e) => failed.push((trace.clone(), failure_line(trace, &e.to_string()))),
        }
    }
    let totals = Totals::of(&done, progress.total_bytes(), seconds, jobs);
    if args.json {
        println!("{}", to_json(&done, &failed, &totals, traces.len()));
    } else {
        print_totals(&totals, done.len(), failed.len(), traces.len());
    }
    for report in &done {
        warn_of_invalid_utf8(report);
    }
    if let Named::ByDirectoriesGiven(pairing) = &named {
        warn_of_missing(pairing);
    }
    for (_, line) in &failed {
        eprintln!("cgfast: failed: {line}");
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(Failure::Said(format!("{} of {} traces failed", failed.len(), traces.len())))
    }
}

/// Where the annotations of the traces come from, as `-a` names them.
enum Named {
    /// No `-a`: the annotation files of the directories given that list each trace,
    /// else its rank's, found beside it.
    ByDirectoriesGiven(Pairing),
    /// `-a DIR`: the file in it that lists each trace, else its rank's.
    InDirectory(Pairing),
    /// `-a FILE`: these, for every trace.
    File(Annotations),
}

/// One line on stderr for the traces that annotation files list and that are gone.
fn warn_of_missing(pairing: &Pairing) {
    let mut missing = pairing.missing();
    let count = missing.len();
    let Some(first) = missing.next() else { return };
    let first = first.display();
    if count == 1 {
        eprintln!("cgfast: warning: a trace that an annotation file lists does not exist, left out: {first}");
    } else {
        eprintln!(
            "cgfast: warning: {} traces that annotation files list do not exist, left out; the first: {first}",
            thousands(count as u64)
        );
    }
}

struct Totals {
    events: u64,
    annotated: u64,
    noise_removed: u64,
    moved: u64,
    fixed: u64,
    large_overlaps: u64,
    largest_overlap_us: f64,
    input_bytes: u64,
    seconds: f64,
    jobs: usize,
}

impl Totals {
    fn of(done: &[Report], input_bytes: u64, seconds: f64, jobs: usize) -> Totals {
        let sum = |f: fn(&Report) -> u64| done.iter().map(f).sum();
        Totals {
            events: sum(|r| r.events),
            annotated: sum(|r| r.annotated),
            noise_removed: sum(|r| r.noise_removed),
            moved: sum(|r| r.moved),
            fixed: sum(|r| r.fixed),
            large_overlaps: sum(|r| r.large_overlaps()),
            largest_overlap_us: done.iter().map(|r| r.largest_overlap_us).fold(0.0, f64::max),
            input_bytes,
            seconds,
            jobs,
        }
    }

    fn rates(&self, files: usize) -> (f64, f64) {
        let s = self.seconds.max(1e-9);
        (files as f64 / s, self.input_bytes as f64 / 1e6 / s)
    }
}

fn print_totals(t: &Totals, done: usize, failed: usize, all: usize) {
    let line = |label: &str, value: String| println!("  {label:<18} {value}");
    let failed_text = if failed > 0 { format!(", {failed} failed") } else { String::new() };
    println!("cgfast annotate: {all} traces, {done} annotated{failed_text}");
    line("events", thousands(t.events));
    line("annotated", thousands(t.annotated));
    line("noise removed", thousands(t.noise_removed));
    line("moved", format!("{} overlapping kernels to their own lane", thousands(t.moved)));
    line("fixed", format!("{} timestamps", thousands(t.fixed)));
    if t.large_overlaps > 0 {
        line(
            "large overlaps",
            format!(
                "{} left as they are (largest {:.3} µs)",
                thousands(t.large_overlaps),
                t.largest_overlap_us
            ),
        );
    }
    line("outputs", "beside each input, as <trace>.annotated.json[.gz]".into());
    let (files_per_s, mb_per_s) = t.rates(all);
    line(
        "time",
        format!("{:.2} s ({files_per_s:.2} files/s, {mb_per_s:.1} MB/s, {} threads)", t.seconds, t.jobs),
    );
}

fn to_json(done: &[Report], failed: &[(PathBuf, String)], t: &Totals, all: usize) -> serde_json::Value {
    let (files_per_s, mb_per_s) = t.rates(all);
    serde_json::json!({
        "traces": all,
        "annotated_traces": done.len(),
        "failed": failed.iter().map(|(p, e)| serde_json::json!({"input": p.display().to_string(), "error": e})).collect::<Vec<_>>(),
        "reports": done.iter().map(|r| r.to_json(false)).collect::<Vec<_>>(),
        "events": t.events,
        "annotated": t.annotated,
        "noise_removed": t.noise_removed,
        "moved": t.moved,
        "fixed": t.fixed,
        "large_overlaps": t.large_overlaps,
        "largest_overlap_us": t.largest_overlap_us,
        "input_bytes": t.input_bytes,
        "seconds": t.seconds,
        "files_per_s": files_per_s,
        "mb_per_s": mb_per_s,
        "jobs": t.jobs,
    })
}
