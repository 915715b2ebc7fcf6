//! `cgfast annotate` of several traces: every trace the inputs name, on all cores,
//! each written beside its input; a failure is reported and the others go on.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use cgfast_core::annotations::file as annotation_file;
use cgfast_core::annotations::Annotations;
use cgfast_core::files::inputs::{self, Wanted};
use cgfast_core::files::many::{self as parallel, FilesProgress};
use cgfast_core::files::paths::{default_output, find_annotations};
use cgfast_core::pipeline::{self, Phase, Report};

use crate::annotate::{thousands, Args, ANNOTATIONS_FLAG};
use crate::files_progress::Files;

type Loaded = Result<Arc<Annotations>, String>;

/// Annotation files, each read once however many traces share it (the traces of
/// one rank over many steps do).
#[derive(Default)]
struct AnnotationFiles {
    loaded: Mutex<HashMap<PathBuf, Arc<OnceLock<Loaded>>>>,
}

impl AnnotationFiles {
    fn get(&self, path: &Path) -> Loaded {
        let slot =
            self.loaded.lock().expect("annotation cache").entry(path.to_path_buf()).or_default().clone();
        slot.get_or_init(|| annotation_file::read(path).map(Arc::new)).clone()
    }
}

struct Annotated {
    annotations: PathBuf,
    report: Report,
}

fn annotate_one(
    args: &Args,
    trace: &Path,
    files: &AnnotationFiles,
    progress: &dyn Fn(f64),
) -> Result<Annotated, String> {
    let annotations = match &args.annotations {
        Some(p) => p.clone(),
        None => find_annotations(trace, ANNOTATIONS_FLAG)?,
    };
    let loaded = files.get(&annotations).map_err(|e| format!("{}: {e}", trace.display()))?;
    let report = pipeline::annotate_file(
        trace,
        &loaded,
        &default_output(trace),
        &args.options(),
        &mut |phase, done, total| {
            let part = done as f64 / total.max(1) as f64;
            progress(match phase {
                Phase::Reading => part / 2.0,
                Phase::Writing => 0.5 + part / 2.0,
            })
        },
    )
    .map_err(|f| f.message)?;
    Ok(Annotated { annotations, report })
}

/// A failure as one line that names the trace (once).
fn failure_line(trace: &Path, message: &str) -> String {
    let shown = trace.display().to_string();
    if message.contains(&shown) {
        message.to_string()
    } else {
        format!("{shown}: {message}")
    }
}

pub fn run(args: &Args) -> Result<(), String> {
    if args.output.is_some() {
        return Err(
            "-o/--output names the output of one trace; with several, each is written beside its input"
                .into(),
        );
    }
    let started = std::time::Instant::now();
    let traces = inputs::find(&args.traces, Wanted::Traces)?;
    let files = AnnotationFiles::default();
    if let Some(shared) = &args.annotations {
        files.get(shared)?;
    }
    let progress = Files::new("annotating", &traces, !args.no_progress, 0);
    let jobs = parallel::threads(args.jobs.unwrap_or(0) as usize).min(traces.len().max(1));
    let results = parallel::map(
        &traces,
        jobs,
        |i, trace| annotate_one(args, trace, &files, &|fraction| progress.advance(i, fraction)),
        &mut |i, result: &Result<Result<Annotated, String>, String>| {
            let result = match result {
                Ok(Ok(a)) => Ok(a),
                Ok(Err(e)) | Err(e) => Err(e.as_str()),
            };
            progress.finished(i, result.is_ok());
            if args.verbose && !args.json {
                progress.clear();
                match result {
                    Ok(a) => println!(
                        "  ok      {}  ({} annotated, {:.2} s)",
                        traces[i].display(),
                        thousands(a.report.annotated),
                        a.report.seconds
                    ),
                    Err(e) => println!("  failed  {}", failure_line(&traces[i], e)),
                }
            }
            progress.show();
        },
        &mut || progress.show(),
    );
    progress.clear();
    if cgfast_core::cancel::requested() {
        return Err("interrupted".into());
    }
    let seconds = started.elapsed().as_secs_f64();
    let mut done = Vec::new();
    let mut failed = Vec::new();
    for (trace, result) in traces.iter().zip(results) {
        match result {
            Ok(Ok(a)) => done.push(a),
            Ok(Err(e)) | Err(e) => failed.push((trace.clone(), failure_line(trace, &e))),
        }
    }
    let totals = Totals::of(&done, progress.total_bytes(), seconds, jobs);
    if args.json {
        println!("{}", to_json(&done, &failed, &totals, traces.len()));
    } else {
        print_totals(&totals, done.len(), failed.len(), traces.len());
    }
    for (_, line) in &failed {
        eprintln!("cgfast: failed: {line}");
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("{} of {} traces failed", failed.len(), traces.len()))
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
    fn of(done: &[Annotated], input_bytes: u64, seconds: f64, jobs: usize) -> Totals {
        let sum = |f: fn(&Report) -> u64| done.iter().map(|a| f(&a.report)).sum();
        Totals {
            events: sum(|r| r.events),
            annotated: sum(|r| r.annotated),
            noise_removed: sum(|r| r.noise_removed),
            moved: sum(|r| r.moved),
            fixed: sum(|r| r.fixed),
            large_overlaps: sum(|r| r.large_overlaps()),
            largest_overlap_us: done.iter().map(|a| a.report.largest_overlap_us).fold(0.0, f64::max),
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

fn to_json(done: &[Annotated], failed: &[(PathBuf, String)], t: &Totals, all: usize) -> serde_json::Value {
    let (files_per_s, mb_per_s) = t.rates(all);
    serde_json::json!({
        "traces": all,
        "annotated_traces": done.len(),
        "failed": failed.iter().map(|(p, e)| serde_json::json!({"input": p.display().to_string(), "error": e})).collect::<Vec<_>>(),
        "reports": done.iter().map(|a| a.report.to_json(Some(&a.annotations), false)).collect::<Vec<_>>(),
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
