//! Pass two's editor of one event: the JSON of a changed event (or flow), spliced into
//! its original bytes where the scan recorded the places, else by parsing it.

use rustc_hash::FxHashMap as HashMap;

use crate::annotations::Resolved;
use crate::index::keys::KeyId;
use crate::index::{NodeId, ReplayMarker, TraceIndex};
use crate::json::edit::{self, Editor, EventEdits, Set};
use crate::read::scan::Layout;
use crate::write::args_text::{args_writes, Writes};
use crate::write::changes::flow_place;
use crate::Lanes;

/// What pass two needs besides the index: the annotations' writes and every lane's
/// JSON, made once, and buffers reused from event to event.
pub(crate) struct Rewriting<'a> {
    index: &'a TraceIndex,
    layout: &'a Layout,
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
    pub(crate) fn new(
        index: &'a TraceIndex,
        layout: &'a Layout,
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
    pub(crate) fn edit(&mut self, id: usize, original_bytes: &[u8], out: &mut Vec<u8>) {
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
