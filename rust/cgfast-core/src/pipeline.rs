//! The file pipeline: one streaming read to index, the passes on the index, one
//! streaming rewrite into an atomically committed output.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::annotations::{Annotations, Resolved};
use crate::edit::{self, EventEdits};
use crate::io::{is_gzip_path, AtomicFile, Sink};
use crate::json::quote;
use crate::key::Key;
use crate::passes::{self, FlowLink, LargeOverlap};
use crate::recover::{self, Recover, Recovery};
use crate::rewrite::{self, Change};
use crate::scan::{self, ScanFailure};
use crate::trace::TraceIndex;

#[derive(Clone, Debug)]
pub struct Options {
    pub default_stream: i64,
    pub overlap_stream: i64,
    pub max_adjust_us: f64,
    pub recover: Recover,
    pub gzip_level: u32,
}

impl Default for Options {
    fn default() -> Self {
        Options { default_stream: 7, overlap_stream: 8, max_adjust_us: 1.0, recover: Recover::Auto, gzip_level: 3 }
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
    pub large_overlaps: u64,
    pub largest_overlap_us: f64,
    pub overlaps: Vec<OverlapDetail>,
    pub flows_moved: u64,
    pub lanes_named: u64,
    pub recovery: Recovery,
    pub input_bytes: u64,
    pub seconds: f64,
}

impl Report {
    pub fn mb_per_s(&self) -> f64 {
        if self.seconds > 0.0 {
            self.input_bytes as f64 / 1e6 / self.seconds
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
    let shown = input.display().to_string();
    let resolved = annotations.resolve_all().map_err(|e| fail(format!("annotations: {e}")))?;
    let (mut index, layout) = scan::scan(input, &mut |done, total| progress(Phase::Reading, done, total)).map_err(|e| match e {
        ScanFailure::Io(err) => fail(format!("{shown}: {}", describe_io(&err))),
        ScanFailure::Invalid(msg, Some(at)) => fail(format!("{shown}: {msg} at byte {at}")),
        ScanFailure::Invalid(msg, None) => fail(format!("{shown}: {msg}")),
    })?;

    let recovery = recover::recover(&mut index, annotations, options.recover);
    let mut annotated = passes::annotate(&mut index, &resolved, options.default_stream, FlowLink::Follow);
    let moved = passes::move_overlapping(&mut index, options.default_stream, options.overlap_stream);
    let fixed = passes::fix_timestamps(&mut index, options.max_adjust_us);
    passes::settle(&mut index, &mut annotated);

    let mut report = Report {
        input: input.to_path_buf(),
        output: output.to_path_buf(),
        annotations_loaded: annotations.nodes.len() as u64,
        events: index.event_count,
        annotated: annotated.annotated,
        noise_removed: annotated.noise_removed,
        metadata_removed: annotated.metadata_removed,
        moved,
        fixed: fixed.fixed,
        large_overlaps: fixed.large.len() as u64,
        largest_overlap_us: fixed.large.iter().map(|l| l.overlap_us).fold(0.0, f64::max),
        overlaps: overlap_details(&index, &fixed.large),
        flows_moved: index.events.iter().filter(|e| e.is_flow_finish() && !e.edit.removed && e.changes_output()).count() as u64,
        lanes_named: annotated.named_lanes.len() as u64,
        recovery,
        input_bytes: std::fs::metadata(input).map(|m| m.len()).unwrap_or(0),
        seconds: 0.0,
    };

    let appended: Vec<String> = annotated.named_lanes.iter().map(|&tid| thread_name_event(&index, annotated.gpu_pid, tid)).collect();
    let changes = changes(&index, layout.spans.clone(), &resolved);

    let out_file = AtomicFile::create(output).map_err(|e| fail(format!("{}: cannot write: {}", output.display(), describe_io(&e))))?;
    let sink_file = out_file.file().try_clone().map_err(|e| fail(format!("{}: {e}", output.display())))?;
    let mut sink = Sink::new(sink_file, is_gzip_path(output), options.gzip_level);
    rewrite::rewrite(input, &layout, changes, &appended, &mut sink, &mut |done, total| progress(Phase::Writing, done, total))
        .and_then(|_| sink.finish())
        .map_err(|e| fail(format!("{}: {}", output.display(), describe_io(&e))))?;
    out_file.commit().map_err(|e| fail(format!("{}: {}", output.display(), describe_io(&e))))?;
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

fn describe_io(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        std::io::ErrorKind::UnexpectedEof => "the gzip data is truncated".into(),
        std::io::ErrorKind::InvalidInput | std::io::ErrorKind::InvalidData => format!("corrupt or unreadable data ({e})"),
        _ => e.to_string(),
    }
}

fn overlap_details(index: &TraceIndex, large: &[LargeOverlap]) -> Vec<OverlapDetail> {
    large
        .iter()
        .map(|l| {
            let e = &index.events[l.event];
            OverlapDetail {
                lane: index.keys.py_str(l.tid),
                name: index.name_of(e).to_string(),
                ts: e.current_ts().map_or(f64::NAN, |t| t.as_f64()),
                overlap_us: l.overlap_us,
            }
        })
        .collect()
}

fn thread_name_event(index: &TraceIndex, pid: Key, tid: Key) -> String {
    format!(
        "{{\"ph\": \"M\", \"pid\": {}, \"tid\": {}, \"name\": \"thread_name\", \"args\": {{\"name\": {}}}}}",
        index.keys.to_json(pid),
        index.keys.to_json(tid),
        quote(&format!("stream {}", index.keys.py_str(tid)))
    )
}

/// The JSON members to set on a tracked event, from what the passes decided.
pub fn event_edits(index: &TraceIndex, i: usize, resolved: &HashMap<i64, Resolved>) -> EventEdits {
    let e = &index.events[i];
    let mut edits = EventEdits::default();
    if let Some(tid) = e.edit.tid.filter(|t| *t != e.tid) {
        edits.top.push(("tid", index.keys.to_json(tid)));
    }
    if let Some(ts) = e.edit.ts {
        edits.top.push(("ts", ts.to_json()));
    }
    if let Some(node) = e.edit.recovered_node {
        edits.args.push(("graph node id".into(), node.to_string()));
    }
    if let Some(r) = e.edit.annotation.and_then(|n| resolved.get(&n)) {
        edits.args.extend(r.writes.iter().map(|(k, v)| (k.clone(), quote(v))));
    }
    if let Some(stream) = e.edit.args_stream {
        edits.args.push(("stream".into(), stream.to_string()));
    }
    edits
}

fn changes(index: &TraceIndex, spans: Vec<scan::Span>, resolved: &HashMap<i64, Resolved>) -> Vec<Change> {
    let mut out = Vec::new();
    for (i, (e, span)) in index.events.iter().zip(spans).enumerate() {
        if !e.changes_output() {
            continue;
        }
        if e.edit.removed {
            out.push(Change::Remove { span, ordinal: e.ordinal as u64 });
            continue;
        }
        let edits = event_edits(index, i, resolved);
        out.push(Change::Replace {
            span,
            with: Box::new(move |bytes: &[u8]| edit::apply(bytes, &edits).unwrap_or_else(|| bytes.to_vec())),
        });
    }
    out
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
            "large_overlaps": self.large_overlaps,
            "largest_overlap_us": self.largest_overlap_us,
            "flows_moved": self.flows_moved,
            "lanes_named": self.lanes_named,
            "recovery": {
                "replays": r.replays,
                "recovered_replays": r.recovered_replays,
                "ambiguous_replays": r.ambiguous_replays,
                "unmatched_replays": r.unmatched_replays,
                "recovered_events": r.recovered_events,
                "unresolved_events": r.unresolved_events,
                "tied_events": r.tied_events,
                "no_topology": r.no_topology,
            },
            "input_bytes": self.input_bytes,
            "seconds": self.seconds,
            "mb_per_s": self.mb_per_s(),
        });
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
