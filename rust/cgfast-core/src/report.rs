//! What a run of [`annotate_file`](crate::annotate_file) did: the [`Report`], as the
//! command line prints it and its `--json` and the Python bindings serialise it.

use std::path::{Path, PathBuf};

use serde_json::{json, Value as Json};

/// What a run did to a trace.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    /// The trace.
    pub input: PathBuf,
    /// Where the annotated trace was written.
    pub output: PathBuf,
    /// The annotation file the annotations came from (`None` for annotations given
    /// some other way).
    pub annotations: Option<PathBuf>,
    /// Nodes the annotations hold.
    pub annotations_loaded: u64,
    /// Elements of `traceEvents`.
    pub events: u64,
    /// Graphed events that received their node's annotation.
    pub annotated: u64,
    /// Replicated profiler noise removed: `gpu_user_annotation` and flow events on lanes
    /// without work.
    pub noise_removed: u64,
    /// `thread_name`/`thread_sort_index` metadata removed with the lanes they named.
    pub metadata_removed: u64,
    /// Overlapping kernels of the default lane moved to the overlap lane.
    pub moved: u64,
    /// Timestamps repaired (overlaps of at most `max_adjust_us`).
    pub fixed: u64,
    /// The largest overlap left as it is, in microseconds (0 without any).
    pub largest_overlap_us: f64,
    /// The overlaps too large to repair, in the order of the trace.
    pub overlaps: Vec<Overlap>,
    /// Flow arrows that moved with their event.
    pub flows_moved: u64,
    /// Lanes given a `thread_name`.
    pub lanes_named: u64,
    /// What node-id recovery did.
    pub recovery: Recovery,
    /// Scope spans added (`None`: spans were off).
    pub spans: Option<u64>,
    /// Invalid UTF-8 sequences in the trace's strings, copied through as they are (each
    /// is what a decoder would show as one U+FFFD).
    pub invalid_utf8: u64,
    /// Where the first of them is, as a byte offset in the trace's (decompressed) JSON.
    pub invalid_utf8_at: Option<u64>,
    /// The size of the input file.
    pub input_bytes: u64,
    /// The size of its JSON (decompressed).
    pub json_bytes: u64,
    /// How long the run took.
    pub seconds: f64,
}

/// An overlap too large to be timestamp jitter, left as it is.
#[derive(Clone, Debug, PartialEq)]
pub struct Overlap {
    /// The lane, as Python's `str()` writes its `tid`.
    pub lane: String,
    /// The event's name.
    pub name: String,
    /// Its start, in microseconds.
    pub ts: f64,
    /// How far it starts before the previous event on its lane ends, in microseconds.
    pub overlap_us: f64,
}

/// What node-id recovery did, for traces whose profiler wrote no `graph node id`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Replays that needed ids.
    pub replays: u64,
    /// Replays given ids.
    pub recovered_replays: u64,
    /// Replays that several recorded graphs fit equally well.
    pub ambiguous_replays: u64,
    /// Replays that no recorded graph fits.
    pub unmatched_replays: u64,
    /// Events given ids.
    pub recovered_events: u64,
    /// Events of ambiguous replays, left without an id.
    pub ambiguous_events: u64,
    /// Events of unmatched replays, left without an id.
    pub unmatched_events: u64,
    /// Events whose node was the lowest local id among several eligible candidates of
    /// the same kind, name and launch shape.
    pub tied_events: u64,
    /// Replays needed ids but the annotations hold no graph topology.
    pub no_topology: bool,
    /// Replays matched to the graph their `cgfast.replay` stamp names.
    pub stamped_replays: u64,
    /// Replays that several graphs fit, all giving every event the same annotation:
    /// given the lowest such graph's ids.
    pub equivalent_replays: u64,
    /// Stamps naming a graph the annotations do not have (then matched as unstamped).
    pub unknown_stamps: u64,
    /// Stamps naming a graph whose kernels do not fit the replay (then matched as
    /// unstamped).
    pub unfit_stamps: u64,
    /// Ranges named `cgfast.replay...` that name no graph: ignored.
    pub malformed_stamps: u64,
    /// Recovered replays whose kernels met their graph's by base names only (some
    /// driver and profiler spellings of one function did not meet).
    pub base_name_replays: u64,
    /// Whether stamps were read and equivalent replays annotated (the counts above
    /// are reported).
    pub exact: bool,
}

impl Recovery {
    /// Ambiguous and unmatched events together: those left without an id.
    pub fn unresolved_events(&self) -> u64 {
        self.ambiguous_events + self.unmatched_events
    }
}

impl Report {
    /// The overlaps too large to repair.
    pub fn large_overlaps(&self) -> u64 {
        self.overlaps.len() as u64
    }

    /// Megabytes of JSON per second.
    pub fn mb_per_s(&self) -> f64 {
        if self.seconds > 0.0 {
            self.json_bytes as f64 / 1e6 / self.seconds
        } else {
            0.0
        }
    }

    /// The report as the command line's `--json` prints it and `cgfast.annotate_file`
    /// returns it; the overlaps listed with `with_overlaps`.
    pub fn to_json(&self, with_overlaps: bool) -> Json {
        let r = &self.recovery;
        let shown = |p: &Path| p.display().to_string();
        let mut v = json!({
            "input": shown(&self.input),
            "output": shown(&self.output),
            "annotations": self.annotations.as_deref().map(shown),
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
            "invalid_utf8": self.invalid_utf8,
            "invalid_utf8_at": self.invalid_utf8_at,
            "input_bytes": self.input_bytes,
            "json_bytes": self.json_bytes,
            "seconds": self.seconds,
            "mb_per_s": self.mb_per_s(),
        });
        if let Some(spans) = self.spans {
            v["spans"] = spans.into();
        }
        if r.exact {
            let exact = json!({
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
                .map(|o| json!({"lane": o.lane, "name": o.name, "ts": o.ts, "overlap_us": o.overlap_us}))
                .collect();
        }
        v
    }
}
