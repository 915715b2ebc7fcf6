//! The file pipeline: one streaming read to index, the passes on the index, one
//! streaming rewrite into an atomically committed output.

use rustc_hash::FxHashMap as HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use crate::annotations::{Annotations, Resolved};
use crate::index::keys::{KeyId, Num, Spelling};
use crate::index::{Flow, NodeId, ReplayMarker, TraceIndex, NONE};
use crate::json::edit::{self, Editor, EventEdits, Set};
use crate::json::quote;
use crate::passes::lanes::{LanePasses, LanePlan};
use crate::passes::recover::{self, Recover, Recovery};
use crate::passes::spans;
use crate::passes::{self, FlowLink, LargeOverlap, OddEvents};
use crate::read::grammar::{describe, describe_io};
use crate::read::input::is_gzip_path;
use crate::read::scan::{self, WriteKeys};
use crate::write::args_text::{args_writes, Writes};
use crate::write::output::{AtomicFile, Sink};
use crate::write::rewrite::{self, Action, Change};
use crate::write::spans_json::SpansJson;

/// Plain outputs of traces from this size on get their blocks reserved, and bypass the
/// page cache where buffered writing is slow (see [`crate::write::direct_io`]).
const LARGE_FROM: u64 = 64 << 20;

#[derive(Clone, Debug)]
pub struct Options {
    pub default_stream: i64,
    pub overlap_stream: i64,
    pub max_adjust_us: f64,
    pub recover: Recover,
    pub gzip_level: u32,
    /// The dotted annotation key whose scopes get spans ([`crate::passes::spans`]); `None`: no spans.
    pub spans: Option<String>,
    /// Recover by the recorded topology alone: no replay stamps, no equivalent replays.
    pub topology_only: bool,
    pub lanes: Lanes,
}

/// Whether graphed events move to the lanes their annotations name (torch 2.15's
/// `graph_lanes`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Lanes {
    /// Move them (the reference's behaviour); a moved event keeps the lane it ran on as
    /// `args["original_stream"]`.
    #[default]
    All,
    /// Move none for annotations; a stream an annotation names is written as
    /// `args["annotated_stream"]`. The overlap lane and timestamp repair still apply.
    None,
    /// Move them as `All` does, without `original_stream`: the reference's output
    /// exactly (with no spans).
    Reference,
}

impl Lanes {
    pub fn parse(text: &str) -> Option<Lanes> {
        match text {
            "all" => Some(Lanes::All),
            "none" => Some(Lanes::None),
            "reference" => Some(Lanes::Reference),
            _ => None,
        }
    }
}

/// The key whose scopes get spans unless told otherwise.
pub const DEFAULT_SPANS: &str = "module";

/// The defaults of [`Options`], which the command line and the bindings show as theirs.
impl Options {
    pub const DEFAULT_STREAM: i64 = 7;
    pub const OVERLAP_STREAM: i64 = 8;
    pub const MAX_ADJUST_US: f64 = 1.0;
    pub const GZIP_LEVEL: u32 = 3;
}

impl Default for Options {
    fn default() -> Self {
        Options {
            default_stream: Options::DEFAULT_STREAM,
            overlap_stream: Options::OVERLAP_STREAM,
            max_adjust_us: Options::MAX_ADJUST_US,
            recover: Recover::Auto,
            gzip_level: Options::GZIP_LEVEL,
            spans: Some(DEFAULT_SPANS.into()),
            topology_only: false,
            lanes: Lanes::All,
        }
    }
}

/// A large overlap, for `--verbose` listings.
#[derive(Clone, Debug, PartialEq)]
pub struct OverlapDetail {
    pub lane: String,
    pub name: String,
    pub ts: f64,
    pub overlap_us: f64,
}

#[derive(Clone, Debug, Default)]
pub struct Report {
    pub input: PathBuf,
    pub output: PathBuf,
    pub annotations_loaded: u64,
    pub events: u64,
    pub annotated: u64,
    pub noise_removed: u64,
    pub metadata_removed: u64,
    pub moved: u64,
    pub fixed: u64,
    pub largest_overlap_us: f64,
    /// The overlaps too large to repair.
    pub overlaps: Vec<OverlapDetail>,
    pub flows_moved: u64,
    pub lanes_named: u64,
    pub recovery: Recovery,
    /// Scope spans added (`None`: spans were off).
    pub spans: Option<u64>,
    /// Size of the input file.
    pub input_bytes: u64,
    /// Size of its JSON (decompressed).
    pub json_bytes: u64,
    pub seconds: f64,
}

/// An edited event's args: the annotation's writes (`all`, or those spliced in place),
/// then the lane it was moved from and its replay's marker.
fn event_args<'b>(
    args: &mut Vec<Set<'b>>,
    node: Option<&'b str>,
    writes: Option<&'b Writes>,
    all: bool,
    stream: Option<&'b str>,
    original: Option<&'b str>,
    marker: Option<&'static str>,
) {
    args_writes(args, node, writes, all, stream);
    if let Some(lane) = original {
        args.push(Set { key: "original_stream", quoted_key: "\"original_stream\"", value: lane });
    }
    if let Some(value) = marker {
        args.push(Set { key: "cgfast", quoted_key: "\"cgfast\"", value });
    }
}

impl Report {
    pub fn large_overlaps(&self) -> u64 {
        self.overlaps.len() as u64
    }

    pub fn mb_per_s(&self) -> f64 {
        if self.seconds > 0.0 {
            self.json_bytes as f64 / 1e6 / self.seconds
        } else {
            0.0
        }
    }
}

/// Why a run failed: one line, and the exit status for it.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    pub message: String,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

fn fail(message: String) -> Failure {
    Failure { message }
}

/// The phases reported to a progress callback.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Reading,
    Writing,
}

/// Annotate `input` into `output`.
pub fn annotate_file(
    input: &Path,
    annotations: &Annotations,
    output: &Path,
    options: &Options,
    progress: &mut dyn FnMut(Phase, u64, u64),
) -> Result<Report, Failure> {
    let started = Instant::now();
    std::fs::metadata(input).map_err(|e| fail(format!("{}: {}", input.display(), describe_io(&e))))?;
    // the output's temporary before reading: a bad -o fails at once
    let mut out_file = AtomicFile::create(output)
        .map_err(|e| fail(format!("{}: cannot write: {}", output.display(), describe_io(&e))))?;
    let write_keys = WriteKeys::new(annotations.write_keys());
    let (mut index, layout) =
        scan::scan(input, &write_keys, &mut |done, total| progress(Phase::Reading, done, total))
            .map_err(|e| fail(describe(input, e)))?;
    let timing = Timing::from_env(started);
    timing.mark("scanned");
    give_back_freed_memory();
    timing.mark("trimmed");
    let passed = run_passes(&mut index, annotations, options, &timing)?;
    timing.mark("passes done");
    let Passed { resolved, annotated, .. } = &passed;
    let mut lane_names: Vec<String> =
        annotated.named_lanes.iter().map(|&lane| thread_name_event(&index, annotated, lane)).collect();
    let mut rewriting = Rewriting::new(&index, &layout, resolved, options.lanes);
    let mut sink = open_sink(&mut out_file, output, layout.total_len, options, annotated.annotated)?;
    let mut edit = |id: usize, original: &[u8], out: &mut Vec<u8>| rewriting.edit(id, original, out);
    // the spans are found while the rewrite copies the trace, on the time it leaves
    let index = &index;
    let key = options.spans.as_deref();
    let mut finder = key.map(|key| {
        spans::SpanFinder::new(index, move |node: NodeId| {
            resolved
                .get(&node)
                .and_then(|r| r.writes.iter().rev().find(|(k, _)| k == key))
                .map(|(_, v)| v.as_str())
        })
    });
    let stop = AtomicBool::new(false);
    let mut spans_made = None;
    std::thread::scope(|scope| {
        let mut early = finder.take_if(|_| crate::threads() > 1).map(|mut finder| {
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
            let mut appended: Vec<Box<dyn rewrite::Appended>> =
                std::mem::take(&mut lane_names).into_iter().map(|name| Box::new(name) as _).collect();
            if let (Some(mut finder), Some(key)) = (made, key) {
                finder.run(&AtomicBool::new(false));
                let spans = finder.finish();
                timing.mark("spans found");
                spans_made = Some(spans.len() as u64);
                if !spans.is_empty() {
                    appended.push(Box::new(SpansJson::new(spans, index, key)));
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
            &mut |done, total| progress(Phase::Writing, done, total),
        );
        // a rewrite that failed leaves a finder to stop
        stop.store(true, Ordering::Relaxed);
        rewritten
            .and_then(|_| sink.finish())
            .map_err(|e| fail(format!("{}: {}", output.display(), describe_io(&e))))
    })?;
    timing.mark("rewritten");
    crate::cancel::check().map_err(|e| fail(format!("{}: {e}", output.display())))?;
    out_file.commit().map_err(|e| fail(format!("{}: {}", output.display(), describe_io(&e))))?;
    let seconds = started.elapsed().as_secs_f64();
    Ok(Report {
        spans: spans_made,
        seconds,
        ..Report::of(input, output, annotations, index, &layout, &passed)
    })
}

impl Report {
    /// What the run did, so far as the passes tell (without the spans and the time).
    fn of(
        input: &Path,
        output: &Path,
        annotations: &Annotations,
        index: &TraceIndex,
        layout: &scan::Layout,
        passed: &Passed,
    ) -> Report {
        let Passed { annotated, fixed, .. } = passed;
        Report {
            input: input.to_path_buf(),
            output: output.to_path_buf(),
            annotations_loaded: annotations.nodes.len() as u64,
            events: index.event_count,
            annotated: annotated.annotated,
            noise_removed: annotated.noise_removed,
            metadata_removed: annotated.metadata_removed,
            moved: passed.moved,
            fixed: fixed.fixed,
            largest_overlap_us: fixed.large.iter().map(|l| l.overlap_us).fold(0.0, f64::max),
            overlaps: overlap_details(index, &fixed.large),
            flows_moved: index.flows.iter().filter(|f| !f.removed() && flow_changed(index, f)).count() as u64,
            lanes_named: annotated.named_lanes.len() as u64,
            recovery: passed.recovery.clone(),
            spans: None,
            input_bytes: std::fs::metadata(input).map(|m| m.len()).unwrap_or(0),
            json_bytes: layout.total_len,
            seconds: 0.0,
        }
    }
}

/// Where the rewritten trace goes, plain or gzipped (by `output`'s name); a large plain
/// one gets its blocks reserved.
fn open_sink(
    out_file: &mut AtomicFile,
    output: &Path,
    json_len: u64,
    options: &Options,
    annotated: u64,
) -> Result<Sink, Failure> {
    let large = out_file.is_regular() && json_len >= LARGE_FROM;
    let gzip = is_gzip_path(output);
    if large && !gzip {
        // annotations make events longer: room for an eighth more, and for about a span
        // per annotated event
        let spans_room = if options.spans.is_some() { annotated * 160 } else { 0 };
        out_file.reserve(json_len + json_len / 8 + spans_room);
    }
    let sink_file = out_file.file().try_clone().map_err(|e| fail(format!("{}: {e}", output.display())))?;
    Ok(Sink::new(sink_file, gzip, options.gzip_level, large))
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
    timing: &Timing,
) -> Result<Passed, Failure> {
    let recovery = recover::recover_with(index, annotations, options.recover, !options.topology_only);
    timing.mark("recovered");
    let used = index.events.iter().filter_map(|e| match e.current_node() {
        crate::index::Node::Id(n) => Some(n),
        _ => None,
    });
    let resolved = annotations.resolve_used(used).map_err(|e| fail(format!("annotations: {e}")))?;
    let (mut annotated, moved, fixed) = annotate_and_fix(index, &resolved, options);
    timing.mark("fixed");
    passes::settle(index, &mut annotated);
    if options.spans.is_some() && index.scope_spans {
        // the spans an earlier run wrote make way for this run's
        index.events.iter_mut().filter(|e| e.scope_span() && !e.removed()).for_each(|e| e.remove());
    }
    timing.mark("settled");
    Ok(Passed { recovery, resolved, annotated, moved, fixed })
}

/// With `CGFAST_TIMING` set, a line on stderr at each mark: the time, CPU time and
/// memory of the run so far.
struct Timing {
    started: Option<Instant>,
}

impl Timing {
    fn from_env(started: Instant) -> Timing {
        Timing { started: std::env::var_os("CGFAST_TIMING").is_some().then_some(started) }
    }

    fn mark(&self, what: &str) {
        let Some(started) = self.started else { return };
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let memory: Vec<&str> =
            status.lines().filter(|l| l.starts_with("VmHWM") || l.starts_with("VmRSS")).collect();
        eprintln!(
            "cgfast timing: {what} at {:.3} s, {:.3} s of CPU, {}",
            started.elapsed().as_secs_f64(),
            cpu_seconds(),
            memory.join(" ").split_whitespace().collect::<Vec<_>>().join(" ")
        );
    }
}

/// The three passes. Once the events have their lanes, the lane passes gather their
/// events on a second thread while the annotate pass finds the flows they move, then
/// decide there while it moves flows and removes noise (they read only the lanes it
/// gave the events before). A plan holding metadata, which that pass may remove, is
/// gathered again after it.
fn annotate_and_fix(
    index: &mut TraceIndex,
    resolved: &HashMap<NodeId, Resolved>,
    options: &Options,
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
    let parallel = crate::threads() > 1;
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

/// The priority of the span finder's thread (Linux threads have their own): a tenth of
/// the weight of a thread at 0, so that it takes little from the rewrite, yet on a
/// machine that other processes keep busy gets a turn soon enough to hand its work over
/// (at 19 it may wait for one far longer).
#[cfg(target_os = "linux")]
const SPARE_TIME_NICE: i32 = 10;

/// Let the calling thread run mostly on what the other threads leave of the processors,
/// where the system allows.
fn run_on_spare_time() {
    #[cfg(target_os = "linux")]
    // SAFETY: plain system calls on the calling thread.
    unsafe {
        let thread = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, thread, SPARE_TIME_NICE);
    }
}

/// Return the memory the scanner's threads freed to the system, so that the passes'
/// peak does not stand on it (with glibc, free memory stays with the thread's arena).
fn give_back_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: no preconditions; it only releases free memory.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// User and system time of the whole process so far.
fn cpu_seconds() -> f64 {
    #[cfg(unix)]
    {
        // SAFETY: getrusage fills the struct it is given.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } == 0 {
            let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
            return seconds(usage.ru_utime) + seconds(usage.ru_stime);
        }
    }
    f64::NAN
}

fn overlap_details(index: &TraceIndex, large: &[LargeOverlap]) -> Vec<OverlapDetail> {
    large
        .iter()
        .map(|l| {
            let e = &index.events[l.event];
            OverlapDetail {
                lane: index.keys.py_str(index.keys.key(l.tid)),
                name: index.name_of(e).to_string(),
                ts: e.current_ts().map_or(f64::NAN, |t| t.as_f64()),
                overlap_us: l.overlap_us,
            }
        })
        .collect()
}

fn thread_name_event(
    index: &TraceIndex,
    annotated: &passes::Annotated,
    (tid, spelling): (KeyId, Spelling),
) -> String {
    let tid = index.keys.key(tid);
    format!(
        "{{\"ph\": \"M\", \"pid\": {}, \"tid\": {}, \"name\": \"thread_name\", \"args\": {{\"name\": {}}}}}",
        index.keys.to_json_spelled(annotated.gpu_pid, annotated.gpu_pid_spelling),
        index.keys.to_json_spelled(tid, spelling),
        quote(&format!("stream {}", index.keys.py_str_spelled(tid, spelling)))
    )
}

/// Where a flow-finish event ends: its event's final lane and start.
fn flow_place(index: &TraceIndex, f: &Flow) -> (KeyId, Option<Num>) {
    if f.follows == NONE {
        return (f.current_tid(), None);
    }
    let target = &index.events[f.follows as usize];
    (target.current_tid(), target.new_ts())
}

fn flow_changed(index: &TraceIndex, f: &Flow) -> bool {
    let (tid, ts) = flow_place(index, f);
    f.removed() || tid != f.tid || ts.is_some()
}

/// The elements to change, in input order: tracked events first numbered, then flows.
fn changes<'a>(index: &'a TraceIndex, layout: &'a scan::Layout) -> impl Iterator<Item = Change> + 'a {
    let events =
        index.events.iter().zip(&layout.event_spans).enumerate().filter(|(_, (e, _))| e.changed()).map(
            |(i, (e, span))| {
                let action = if e.removed() { Action::Remove } else { Action::Replace { id: i } };
                Change { span: *span, ordinal: e.ordinal as u64, action }
            },
        );
    let n = index.events.len();
    let flows = index
        .flows
        .iter()
        .zip(&layout.flow_spans)
        .enumerate()
        .filter(|(_, (f, _))| flow_changed(index, f))
        .map(move |(j, (f, span))| {
            let action = if f.removed() { Action::Remove } else { Action::Replace { id: n + j } };
            Change { span: *span, ordinal: f.ordinal as u64, action }
        });
    merge_by_ordinal(events, flows)
}

fn merge_by_ordinal(
    a: impl Iterator<Item = Change>,
    b: impl Iterator<Item = Change>,
) -> impl Iterator<Item = Change> {
    let mut a = a.peekable();
    let mut b = b.peekable();
    std::iter::from_fn(move || match (a.peek(), b.peek()) {
        (Some(x), Some(y)) => {
            if x.ordinal < y.ordinal {
                a.next()
            } else {
                b.next()
            }
        }
        (Some(_), None) => a.next(),
        (None, _) => b.next(),
    })
}

/// What pass two needs besides the index: the annotations' writes and every lane's
/// JSON, made once, and buffers reused from event to event.
struct Rewriting<'a> {
    index: &'a TraceIndex,
    layout: &'a scan::Layout,
    writes: HashMap<NodeId, Writes>,
    lane_json: Vec<String>,
    editor: Editor,
    ts_text: String,
    node_text: String,
    graph_text: String,
    edits: EventEdits<'static>,
    /// Write `args["original_stream"]` on the events that change lanes.
    original_stream: bool,
}

impl<'a> Rewriting<'a> {
    fn new(
        index: &'a TraceIndex,
        layout: &'a scan::Layout,
        resolved: &HashMap<NodeId, Resolved>,
        lanes: Lanes,
    ) -> Rewriting<'a> {
        Rewriting {
            index,
            layout,
            writes: resolved.iter().map(|(&node, r)| (node, node_writes(r, lanes))).collect(),
            original_stream: lanes == Lanes::All,
            lane_json: (0..index.keys.count() as KeyId)
                .map(|id| index.keys.to_json(index.keys.key(id)))
                .collect(),
            editor: Editor::default(),
            ts_text: String::new(),
            node_text: String::new(),
            graph_text: String::new(),
            edits: EventEdits::default(),
        }
    }
}

/// A node's writes: with `--lanes none` its `stream` becomes `annotated_stream`, an
/// integer, as torch 2.15 writes it for an event it does not move.
fn node_writes(r: &Resolved, lanes: Lanes) -> Writes {
    match (lanes, r.stream) {
        (Lanes::None, Some(stream)) => {
            let kept: Vec<(String, String)> =
                r.writes.iter().filter(|(k, _)| k != "stream").cloned().collect();
            Writes::new(&kept).with_raw("annotated_stream", &stream.to_string())
        }
        _ => Writes::new(&r.writes),
    }
}

/// An empty list that reuses the allocation of `sets` (collecting a vector's own
/// elements into a vector of the same layout happens in place).
fn recycle<'b>(mut sets: Vec<Set<'_>>) -> Vec<Set<'b>> {
    sets.clear();
    sets.into_iter().map(|_| unreachable!("cleared")).collect()
}

impl Rewriting<'_> {
    /// Write the edited form of tracked event (or flow) `id` into `out`.
    fn edit(&mut self, id: usize, original_bytes: &[u8], out: &mut Vec<u8>) {
        use std::fmt::Write;
        let index = self.index;
        let mut marker = None;
        let (tid, ts, stream, node, annotation, places, original) = if id < index.events.len() {
            let e = &index.events[id];
            marker = e.replay_marker_change();
            let original = (self.original_stream && e.moved_to().is_some()).then_some(e.tid);
            (
                e.moved_to(),
                e.new_ts(),
                e.new_lane(),
                e.recovered_node(),
                e.annotation(),
                self.layout.event_places[id],
                original,
            )
        } else {
            let j = id - index.events.len();
            let f = &index.flows[j];
            let (tid, ts) = flow_place(index, f);
            ((tid != f.tid).then_some(tid), ts, None, None, None, self.layout.flow_places[j].places(), None)
        };
        self.ts_text.clear();
        self.node_text.clear();
        let mut edits = EventEdits {
            top: recycle(std::mem::take(&mut self.edits.top)),
            args: recycle(std::mem::take(&mut self.edits.args)),
        };
        if let Some(t) = tid {
            edits.top.push(Set { key: "tid", quoted_key: "\"tid\"", value: &self.lane_json[t as usize] });
        }
        if let Some(t) = ts {
            self.ts_text.push_str(&t.to_json());
            edits.top.push(Set { key: "ts", quoted_key: "\"ts\"", value: &self.ts_text });
        }
        self.graph_text.clear();
        // in a trace of split ids a recovered id is written back split: the graph id
        // and the local id below 2^32
        let split = node.filter(|&n| index.split_ids && n >> 32 > 0);
        if let Some(n) = split {
            write!(self.graph_text, "{}", n >> 32).expect("writing to a String");
            write!(self.node_text, "{}", n & 0xFFFF_FFFF).expect("writing to a String");
        } else if let Some(n) = node {
            write!(self.node_text, "{n}").expect("writing to a String");
        }
        let writes = annotation.and_then(|n| self.writes.get(&n));
        // the writes to keys spliced in place, and the rest as one run, where it fits
        // an original_stream goes last, so the run (which a splice appends after the
        // listed writes) is not used with it
        let run = writes.filter(|w| original.is_none() && w.run_fits(&places, stream.is_some()));
        let node_text = node.map(|_| self.node_text.as_str());
        let lane_text = stream.map(|lane| self.lane_json[lane as usize].as_str());
        let original_text = original.map(|lane| self.lane_json[lane as usize].as_str());
        let marker_json = marker.and_then(|m| m.json());
        event_args(&mut edits.args, node_text, writes, run.is_none(), lane_text, original_text, marker_json);
        // an event that may hold a "graph id" already, or a marker an earlier run wrote,
        // is edited by parsing: only that replaces a member
        let parsed = split.is_some() || marker.is_some();
        if parsed || !edit::splice(original_bytes, &places, &edits, run.map_or("", |w| &w.run), out) {
            // where a splice fails, it fails for the writes in any form
            if run.is_some() {
                event_args(&mut edits.args, node_text, writes, true, lane_text, original_text, marker_json);
            }
            if split.is_some() {
                edits
                    .args
                    .insert(0, Set { key: "graph id", quoted_key: "\"graph id\"", value: &self.graph_text });
            }
            let start = out.len();
            if !self.editor.apply(original_bytes, &edits, out) {
                out.extend_from_slice(original_bytes);
            } else if marker == Some(ReplayMarker::None) && !writes.is_some_and(|w| w.writes_key("cgfast")) {
                // the replay is resolved now: the earlier run's marker goes (unless the
                // annotation itself writes that key)
                let edited = out.split_off(start);
                if !edit::drop_arg(&edited, "cgfast", out) {
                    out.extend_from_slice(&edited);
                }
            }
        }
        self.edits = EventEdits { top: recycle(edits.top), args: recycle(edits.args) };
    }
}

impl Report {
    /// The report as the CLI's `--json` prints it and `cgfast.annotate_file` returns it.
    pub fn to_json(&self, annotations_path: Option<&Path>, with_overlaps: bool) -> serde_json::Value {
        let r = &self.recovery;
        let mut v = serde_json::json!({
            "input": self.input.display().to_string(),
            "output": self.output.display().to_string(),
            "annotations": annotations_path.map(|p| p.display().to_string()),
            "annotations_loaded": self.annotations_loaded,
            "events": self.events,
            "annotated": self.annotated,
            "noise_removed": self.noise_removed,
            "metadata_removed": self.metadata_removed,
            "moved": self.moved,
            "fixed": self.fixed,
            "large_overlaps": self.large_overlaps(),
            "largest_overlap_us": self.largest_overlap_us,
            "flows_moved": self.flows_moved,
            "lanes_named": self.lanes_named,
            "recovery": {
                "replays": r.replays,
                "recovered_replays": r.recovered_replays,
                "ambiguous_replays": r.ambiguous_replays,
                "unmatched_replays": r.unmatched_replays,
                "recovered_events": r.recovered_events,
                "ambiguous_events": r.ambiguous_events,
                "unmatched_events": r.unmatched_events,
                "unresolved_events": r.unresolved_events(),
                "tied_events": r.tied_events,
                "no_topology": r.no_topology,
            },
            "input_bytes": self.input_bytes,
            "json_bytes": self.json_bytes,
            "seconds": self.seconds,
            "mb_per_s": self.mb_per_s(),
        });
        if let Some(spans) = self.spans {
            v["spans"] = spans.into();
        }
        if r.exact {
            let exact = serde_json::json!({
                "stamped_replays": r.stamped_replays,
                "equivalent_replays": r.equivalent_replays,
                "unknown_stamps": r.unknown_stamps,
                "unfit_stamps": r.unfit_stamps,
                "malformed_stamps": r.malformed_stamps,
                "base_name_replays": r.base_name_replays,
            });
            for (k, value) in exact.as_object().expect("an object") {
                v["recovery"][k] = value.clone();
            }
        }
        if with_overlaps {
            v["overlaps"] = self
                .overlaps
                .iter()
                .map(|o| serde_json::json!({"lane": o.lane, "name": o.name, "ts": o.ts, "overlap_us": o.overlap_us}))
                .collect();
        }
        v
    }
}
