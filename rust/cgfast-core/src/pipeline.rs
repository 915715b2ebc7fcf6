//! The file pipeline: one streaming read to index, the passes on the index, one
//! streaming rewrite into an atomically committed output.

use rustc_hash::FxHashMap as HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use crate::annotations::{Annotations, Resolved};
use crate::index::{Node, NodeId, TraceIndex};
use crate::passes::lanes::{LanePasses, LanePlan};
use crate::passes::spans::SpanFinder;
use crate::passes::{self, recover, FlowLink, LargeOverlap, OddEvents};
use crate::read::input::is_gzip_path;
use crate::read::scan::{self, Layout, WriteKeys};
use crate::report::{Overlap, Recovery};
use crate::sys::{give_back_freed_memory, run_on_spare_time, Timing};
use crate::write::atomic_file::AtomicFile;
use crate::write::changes::{changes, flow_changed, thread_name_event};
use crate::write::event_edit::Rewriting;
use crate::write::rewrite::{self, Appended, RewriteError};
use crate::write::sink::Sink;
use crate::write::spans_json::SpansJson;
use crate::{CancelToken, Error, Lanes, Options, Report, WriteMode};

/// Plain outputs of traces from this size on get their blocks reserved, and bypass the
/// page cache where buffered writing is slow (see [`crate::write::direct_io`]).
const LARGE_FROM: u64 = 64 << 20;

/// The stage of a run that a progress callback hears of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// The first pass, which reads and indexes the trace.
    Reading,
    /// The second pass, which writes the annotated trace.
    Writing,
}

/// Annotate the trace `input` (JSON, plain or gzipped) with `annotations` into `output`
/// (gzipped when its name ends in `.gz`), as `options` say: node ids recovered where the
/// trace has none, graphed events annotated and moved to their lanes, replicated noise
/// removed, overlapping kernels moved aside, timestamp jitter repaired and scope spans
/// added. `progress(phase, done, total)` hears how far each pass is, in bytes of the
/// input file. The output appears only when complete: a failed or cancelled run leaves
/// no file behind and no existing one changed.
pub fn annotate_file(
    input: &Path,
    annotations: &Annotations,
    output: &Path,
    options: &Options,
    cancel: &CancelToken,
    progress: &mut dyn FnMut(Phase, u64, u64),
) -> Result<Report, Error> {
    options.check()?;
    annotate(input, annotations, output, options, cancel, progress).map_err(|e| {
        if cancel.is_cancelled() {
            Error::Cancelled
        } else {
            e
        }
    })
}

fn annotate(
    input: &Path,
    annotations: &Annotations,
    output: &Path,
    options: &Options,
    cancel: &CancelToken,
    progress: &mut dyn FnMut(Phase, u64, u64),
) -> Result<Report, Error> {
    let started = Instant::now();
    let input_bytes = std::fs::metadata(input).map_err(|e| Error::read(input, e))?.len();
    // the output's temporary before reading: a bad output fails at once
    let mut out_file = AtomicFile::create(output).map_err(|e| Error::write(output, e))?;
    let threads = options.thread_count();
    let write_keys = WriteKeys::new(annotations.write_keys());
    let (mut index, layout) = scan::scan(input, &write_keys, threads, cancel, &mut |done, total| {
        progress(Phase::Reading, done, total)
    })
    .map_err(|failure| failure.error(input))?;
    let timing = Timing::new(options.timing, started);
    timing.mark("scanned");
    give_back_freed_memory();
    timing.mark("trimmed");
    let passed = run_passes(&mut index, annotations, options, threads, &timing)?;
    timing.mark("passes done");
    let Passed { resolved, annotated, .. } = &passed;
    let mut lane_names: Vec<String> =
        annotated.named_lanes.iter().map(|&lane| thread_name_event(&index, annotated, lane)).collect();
    let mut rewriting = Rewriting::new(&index, &layout, resolved, options.lanes);
    let mut sink = open_sink(&mut out_file, output, layout.total_len, options, annotated.annotated, cancel)?;
    let mut edit = |id: usize, original: &[u8], out: &mut Vec<u8>| rewriting.edit(id, original, out);
    // the spans are found while the rewrite copies the trace, on the time it leaves
    let index = &index;
    let key = options.spans.key();
    let mut finder = key.map(|key| {
        SpanFinder::new(index, move |node: NodeId| {
            resolved
                .get(&node)
                .and_then(|r| r.writes.iter().rev().find(|(k, _)| k == key))
                .map(|(_, v)| v.as_str())
        })
    });
    let stop = AtomicBool::new(false);
    let mut spans_made = None;
    std::thread::scope(|scope| {
        let mut early = finder.take_if(|_| threads > 1).map(|mut finder| {
            let stop = &stop;
            scope.spawn(move || {
                run_on_spare_time();
                finder.run(stop);
                finder
            })
        });
        let mut appended = || {
            timing.mark("copied");
            // what the finder has not done yet is finished here, at this thread's priority
            stop.store(true, Ordering::Relaxed);
            let made = match early.take() {
                Some(job) => Some(job.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))),
                None => finder.take(),
            };
            let mut appended: Vec<Box<dyn Appended>> =
                std::mem::take(&mut lane_names).into_iter().map(|name| Box::new(name) as _).collect();
            if let (Some(mut finder), Some(key)) = (made, key) {
                finder.run(&AtomicBool::new(false));
                let spans = finder.finish();
                timing.mark("spans found");
                spans_made = Some(spans.len() as u64);
                if !spans.is_empty() {
                    // the rewrite and the output's writer have a core each
                    let workers = threads.saturating_sub(2).min(6);
                    appended.push(Box::new(SpansJson::new(spans, index, key, workers)));
                }
            }
            appended
        };
        let rewritten = rewrite::rewrite(
            input,
            &layout,
            changes(index, &layout),
            &mut edit,
            &mut appended,
            &mut sink,
            cancel,
            &mut |done, total| progress(Phase::Writing, done, total),
        );
        // a rewrite that failed leaves a finder to stop
        stop.store(true, Ordering::Relaxed);
        match rewritten {
            Ok(()) => sink.finish().map_err(|e| Error::write(output, e)),
            Err(RewriteError::Input(e)) => Err(Error::read(input, e)),
            Err(RewriteError::Output(e)) => Err(Error::write(output, e)),
        }
    })?;
    timing.mark("rewritten");
    if cancel.is_cancelled() {
        return Err(Error::Cancelled);
    }
    out_file.commit().map_err(|e| Error::write(output, e))?;
    Ok(Report {
        input: input.to_path_buf(),
        output: output.to_path_buf(),
        spans: spans_made,
        input_bytes,
        seconds: started.elapsed().as_secs_f64(),
        ..report(annotations, index, &layout, &passed)
    })
}

/// Where the rewritten trace goes, plain or gzipped (by `output`'s name); a large plain
/// one gets its blocks reserved.
fn open_sink(
    out_file: &mut AtomicFile,
    output: &Path,
    json_len: u64,
    options: &Options,
    annotated: u64,
    cancel: &CancelToken,
) -> Result<Sink, Error> {
    let large = out_file.is_regular() && json_len >= LARGE_FROM;
    let gzip = is_gzip_path(output);
    if large && !gzip {
        // annotations make events longer: room for an eighth more, and for about a span
        // per annotated event
        let spans_room = if options.spans.key().is_some() { annotated * 160 } else { 0 };
        out_file.reserve(json_len + json_len / 8 + spans_room);
    }
    let sink_file = out_file.file().try_clone().map_err(|e| Error::write(output, e))?;
    let gzip = gzip.then(|| (options.gzip_level, options.thread_count()));
    let mode = if large { options.write_mode } else { WriteMode::Buffered };
    Ok(Sink::new(sink_file, gzip, mode, cancel))
}

/// What the passes made of the index: its recovery, the annotations of the nodes it
/// uses, and the annotate and lane passes' outcomes.
struct Passed {
    recovery: Recovery,
    resolved: HashMap<NodeId, Resolved>,
    annotated: passes::Annotated,
    moved: u64,
    fixed: passes::Fixed,
}

/// Recover node ids, resolve the annotations of the nodes used, and run the passes.
fn run_passes(
    index: &mut TraceIndex,
    annotations: &Annotations,
    options: &Options,
    threads: usize,
    timing: &Timing,
) -> Result<Passed, Error> {
    let recovery = recover::recover_with(index, annotations, options.recover, !options.topology_only);
    timing.mark("recovered");
    let used = index.events.iter().filter_map(|e| match e.current_node() {
        Node::Id(n) => Some(n),
        _ => None,
    });
    let resolved = annotations.resolve_used(used).map_err(|e| match &annotations.source {
        Some(file) => Error::annotations(Some(file), e.0),
        None => Error::annotations(None, format!("annotations: {}", e.0)),
    })?;
    let (mut annotated, moved, fixed) = annotate_and_fix(index, &resolved, options, threads > 1);
    timing.mark("fixed");
    passes::settle(index, &mut annotated);
    if options.spans.key().is_some() && index.scope_spans {
        // the spans an earlier run wrote make way for this run's
        index.events.iter_mut().filter(|e| e.scope_span() && !e.removed()).for_each(|e| e.remove());
    }
    timing.mark("settled");
    Ok(Passed { recovery, resolved, annotated, moved, fixed })
}

/// The three passes. Once the events have their lanes, the lane passes gather their
/// events on a second thread (where `parallel`) while the annotate pass finds the flows
/// they move, then decide there while it moves flows and removes noise (they read only
/// the lanes it gave the events before). A plan holding metadata, which that pass may
/// remove, is gathered again after it.
fn annotate_and_fix(
    index: &mut TraceIndex,
    resolved: &HashMap<NodeId, Resolved>,
    options: &Options,
    parallel: bool,
) -> (passes::Annotated, u64, passes::Fixed) {
    let link = FlowLink::Follow;
    let lane_passes = LanePasses {
        overlap: Some((options.default_stream, options.overlap_stream)),
        max_adjust_us: Some(options.max_adjust_us),
        odd: OddEvents::Skip,
    };
    let relane = match options.lanes {
        Lanes::None => passes::Relane::Keep,
        _ => passes::Relane::Move { kept: Some(options.overlap_stream) },
    };
    let annotated = passes::relane_with(index, resolved, options.default_stream, link, relane);
    let shared = &*index;
    let (visits, plan) =
        both(parallel, || passes::FlowVisits::find(shared, link), || LanePlan::gather(shared, lane_passes));
    let plan = Some(plan).filter(|plan| !plan.holds_metadata());
    let (annotated, decided) = both(
        parallel,
        || passes::after_relane(index, link, annotated, visits),
        || plan.map(LanePlan::decide),
    );
    let decided = decided.unwrap_or_else(|| LanePlan::gather(index, lane_passes).decide());
    let outcome = decided.apply(index);
    // skipped odd events leave nothing to refuse
    (annotated, outcome.moved.unwrap_or(0), outcome.fixed.unwrap_or_default())
}

/// `first()` and `second()`, the second on a thread of its own where `parallel`.
fn both<A, B: Send>(parallel: bool, first: impl FnOnce() -> A, second: impl FnOnce() -> B + Send) -> (A, B) {
    if !parallel {
        let a = first();
        return (a, second());
    }
    std::thread::scope(|scope| {
        let running = scope.spawn(second);
        let a = first();
        (a, running.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
    })
}

/// What the run did, so far as the index and the passes tell (without the files, the
/// spans and the time).
fn report(annotations: &Annotations, index: &TraceIndex, layout: &Layout, passed: &Passed) -> Report {
    let Passed { annotated, fixed, .. } = passed;
    Report {
        annotations: annotations.source.clone(),
        annotations_loaded: annotations.nodes.len() as u64,
        events: index.event_count,
        annotated: annotated.annotated,
        noise_removed: annotated.noise_removed,
        metadata_removed: annotated.metadata_removed,
        moved: passed.moved,
        fixed: fixed.fixed,
        largest_overlap_us: fixed.large.iter().map(|l| l.overlap_us).fold(0.0, f64::max),
        overlaps: fixed.large.iter().map(|l| overlap(index, l)).collect(),
        flows_moved: index.flows.iter().filter(|f| !f.removed() && flow_changed(index, f)).count() as u64,
        lanes_named: annotated.named_lanes.len() as u64,
        recovery: passed.recovery.clone(),
        invalid_utf8: layout.invalid_utf8.count,
        invalid_utf8_at: layout.invalid_utf8.first_at,
        json_bytes: layout.total_len,
        ..Report::default()
    }
}

fn overlap(index: &TraceIndex, large: &LargeOverlap) -> Overlap {
    let e = &index.events[large.event];
    Overlap {
        lane: index.keys.py_str(index.keys.key(large.tid)),
        name: index.name_of(e).to_string(),
        ts: e.current_ts().map_or(f64::NAN, |t| t.as_f64()),
        overlap_us: large.overlap_us,
    }
}
