//! cgfast's core: the trace processor that the `cgfast` command line and the Python
//! bindings share, free of Python.
//!
//! [`annotate_file`] annotates a CUDA-graph profiler trace (Chrome/Kineto JSON, plain
//! or gzipped) with the [`Annotations`] the capture layer recorded, as [`Options`] say,
//! into an output that appears only when complete, and returns a [`Report`] of what it
//! did; [`annotate_files`] does so for many traces at once. Each run takes its own
//! [`CancelToken`], through which another thread (or a signal handler) stops it, and
//! fails with an [`Error`] whose message is one line naming the file at fault.
//! Annotation files are read and written by [`read_annotations`] and
//! [`write_annotations`]; [`find_annotations`], [`default_output`] and [`find_traces`]
//! name the files a run touches, and a [`Pairing`] ([`find_paired_traces`]) gives each
//! trace the annotation file that lists it.
//!
//! [`summarize_files`] says where the GPU time of graph replays goes, per value of an
//! annotation key, as a [`Summary`] (with [`write_chart`] to draw it); [`diff_files`]
//! which values got slower or faster between two runs, as a [`Diff`] (with
//! [`write_diff_chart`]).
//!
//! [`reference`](mod@reference) runs the reference's three passes on a trace whose events the caller
//! holds (the Python bindings' dict API).
//!
//! Inside, a run takes a trace through three stages: one streaming pass reads and
//! checks the JSON and builds a compact index of the events a pass may change (`read`,
//! `index`); the passes decide on the index (`passes`); a second streaming pass copies
//! every untouched byte and splices in the changed events (`write`); `pipeline` holds
//! them together.

#![warn(missing_docs)]

mod annotations;
mod cancel;
mod error;
mod files;
mod index;
mod json;
mod options;
mod passes;
mod pipeline;
mod read;
pub mod reference;
mod report;
mod summary;
mod sys;
mod write;

pub use annotations::file::{read as read_annotations, write as write_annotations};
pub use annotations::value::Value;
pub use annotations::{Annotations, GraphNode, Item, NodeKind};
pub use cancel::CancelToken;
pub use error::Error;
pub use files::inputs::{find as find_traces, Wanted};
pub use files::many::{annotate_files, AnnotationsOf, FilesProgress, Silent};
pub use files::paths::{default_output, find_annotations};
pub use files::recorded::{find_paired_traces, Pairing};
pub use index::NodeId;
pub use options::{Lanes, Options, Recover, Spans, WriteMode};
pub use pipeline::{annotate_file, Phase};
pub use report::{Overlap, Recovery, Report};
pub use summary::chart::check_chart;
pub use summary::chart::write as write_chart;
pub use summary::diff::{
    diff_files, Comparison, Diff, DiffOptions, DiffRow, KernelChange, Offender, SideInfo, SideStats,
    TraceInfo, Verdict, MIN_RUNS as DIFF_MIN_RUNS, RESAMPLES as DIFF_RESAMPLES,
};
pub use summary::diff_chart::{signed_pct, write as write_diff_chart};
pub use summary::diff_stats::{Shift, CONFIDENCE as DIFF_CONFIDENCE};
pub use summary::efficiency::{CountTotals, Efficiency, EfficiencyRow, PeakOverride};
pub use summary::hierarchy::{Hierarchy, MODULE_KEY};
pub use summary::key::{fallback_note as default_key_note, label as key_label, DefaultKey, KERNEL_KEY};
pub use summary::peaks::DtypeClass;
pub use summary::throughput_change::{throughput_changes, ThroughputChange};
pub use summary::time::Spread;
pub use summary::{
    summarize_file, summarize_files, NameTotals, Replay, ReplayValue, Row, Summary, SummaryOptions, Totals,
    TraceTotals, ValueTotals,
};
