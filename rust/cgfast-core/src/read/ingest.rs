//! Ingestion: each event read (from JSON by the scan, or from the fields a caller hands
//! over, as the Python bindings do) recorded in the [`TraceIndex`], and the indexes of
//! a parallel scan's segments joined in order.

use crate::index::keys::{Key, KeyId, Num, Spelling};
use crate::index::tracked::Ids;
use crate::index::{is_graph_launch, stamp_graph, Cat, Field, Flow, Kept, Launch, Node, Ph, ReplayMarker};
use crate::index::{Stamp, TraceIndex, Tracked, NONE, STAMP_PREFIX};

/// Whether the event needs more than its lane recorded: the scanner decodes the
/// other fields only for these.
pub(crate) fn is_tracked(cat: Cat, ph: Ph, node: Node) -> bool {
    node != Node::Missing
        || cat.is_work()
        || cat == Cat::UserAnnotation
        || cat == Cat::Runtime
        || cat == Cat::Ac2g
        || ph == Ph::Meta
}

/// What an event says about itself, decoded from JSON or handed over by a caller.
#[derive(Clone, Debug)]
pub(crate) struct Observed<'a> {
    pub(crate) ph: Ph,
    pub(crate) cat: Cat,
    pub(crate) name: Option<&'a str>,
    pub(crate) pid: Option<Key>,
    pub(crate) tid: Key,
    /// How `pid` and `tid` were written, where an integer key hides it (`7.0`, `true`).
    pub(crate) pid_spelling: Spelling,
    pub(crate) tid_spelling: Spelling,
    pub(crate) ts: Field<Num>,
    pub(crate) dur: Field<Num>,
    pub(crate) args: Field<()>,
    pub(crate) node: Node,
    pub(crate) args_stream: Option<Key>,
    /// `str(args["name"])` starts with `"stream "`.
    pub(crate) args_name_is_stream: bool,
    /// A scope span cgfast wrote (`args["cgfast"] == "scope"` on a `gpu_user_annotation`).
    pub(crate) scope_span: bool,
    /// The replay marker an earlier run wrote in `args["cgfast"]`.
    pub(crate) replay_marker: ReplayMarker,
    /// Its args hold `original_stream`: an earlier run moved it.
    pub(crate) moved_earlier: bool,
    pub(crate) correlation: Option<i64>,
    pub(crate) grid_block: Option<[u32; 6]>,
}

impl TraceIndex {
    /// Record one event of `traceEvents`, the `ordinal`-th.
    pub(crate) fn observe(&mut self, ordinal: u32, ev: &Observed<'_>) -> Kept {
        self.event_count += 1;
        let tid = self.keys.id(ev.tid);
        let pid = ev.pid.map_or(NONE, |p| self.keys.id(p));
        if ev.cat == Cat::Runtime && ev.name.is_some_and(is_graph_launch) {
            if let Some(c) = ev.correlation {
                self.graph_launches.insert(c);
                if let Some(ts) = ev.ts.value() {
                    self.launches.push(Launch { correlation: c, pid, tid, ts: ts.as_f64() });
                }
            }
        }
        if ev.cat == Cat::CpuAnnotation && ev.name.is_some_and(|n| n.starts_with(STAMP_PREFIX)) {
            self.note_stamp(pid, tid, ev);
        }
        if ev.cat == Cat::Ac2g && ev.ph == Ph::FlowFinish && ev.node == Node::Missing {
            self.flows.push(Flow::observed(ordinal, pid, tid, ev.ts.value()));
            return Kept::Flow(self.flows.len() - 1);
        }
        let tracked = ev.node != Node::Missing
            || ev.cat.is_work()
            || ev.cat == Cat::UserAnnotation
            || ev.ph == Ph::Meta;
        if !tracked {
            if ev.ph != Ph::Meta {
                self.use_lane(tid);
            }
            return Kept::Lane;
        }
        if ev.scope_span && ev.cat == Cat::UserAnnotation {
            self.scope_spans = true;
        }
        let name = match ev.name {
            Some(n) if ev.cat.is_work() || ev.node != Node::Missing => self.names.intern(n),
            _ => NONE,
        };
        let shape = ev.grid_block.map_or(NONE, |gb| self.shape_id(gb));
        let args_stream = ev.args_stream.map_or(NONE, |s| self.keys.id(s));
        self.events.push(Tracked::observed(ordinal, ev, Ids { pid, tid, args_stream, name, shape }));
        Kept::Event(self.events.len() - 1)
    }

    fn note_stamp(&mut self, pid: KeyId, tid: KeyId, ev: &Observed<'_>) {
        let graph = ev.name.and_then(stamp_graph);
        match (graph, ev.ts.value(), ev.dur.value()) {
            (Some(graph), Some(ts), Some(dur)) => {
                let start = ts.as_f64();
                self.stamps.push(Stamp { pid, tid, start, end: start + dur.as_f64(), graph });
            }
            _ => self.malformed_stamps += 1,
        }
    }

    /// Add the index of the segment of `traceEvents` after this one, whose first event
    /// is element `offset`. Its events and flows move here: its vectors are left empty,
    /// their room kept for another segment.
    pub(crate) fn append(&mut self, next: &mut TraceIndex, offset: u32) {
        let keys: Vec<KeyId> =
            (0..next.keys.count() as KeyId).map(|id| self.keys.import(&next.keys, id)).collect();
        let names: Vec<u32> =
            (0..next.names.len() as u32).map(|id| self.names.intern(next.names.get(id))).collect();
        let shapes: Vec<u32> = next.shapes.iter().map(|gb| self.shape_id(*gb)).collect();
        for (id, used) in next.untracked_lanes.iter().enumerate() {
            if *used {
                self.use_lane(keys[id]);
            }
        }
        self.graph_launches.extend(std::mem::take(&mut next.graph_launches));
        self.event_count += next.event_count;
        self.malformed_stamps += std::mem::take(&mut next.malformed_stamps);
        self.split_ids |= next.split_ids;
        self.scope_spans |= next.scope_spans;
        let r = Renames { keys, names, shapes, offset };
        self.launches.extend(next.launches.drain(..).map(|l| Launch {
            pid: r.key(l.pid),
            tid: r.key(l.tid),
            ..l
        }));
        self.stamps.extend(next.stamps.drain(..).map(|s| Stamp {
            pid: r.key(s.pid),
            tid: r.key(s.tid),
            ..s
        }));
        self.events.extend(next.events.drain(..).map(|mut e| {
            e.ordinal += r.offset;
            e.pid = r.key(e.pid);
            e.tid = r.key(e.tid);
            e.args_stream = r.key(e.args_stream);
            e.new_tid = r.key(e.new_tid);
            e.name = renamed(&r.names, e.name);
            e.shape = renamed(&r.shapes, e.shape);
            e
        }));
        self.flows.extend(next.flows.drain(..).map(|mut f| {
            f.ordinal += r.offset;
            f.pid = r.key(f.pid);
            f.tid = r.key(f.tid);
            f.new_tid = r.key(f.new_tid);
            f
        }));
    }
}

/// How the ids of one appended segment map to those of the index it joins.
struct Renames {
    keys: Vec<KeyId>,
    names: Vec<u32>,
    shapes: Vec<u32>,
    offset: u32,
}

impl Renames {
    fn key(&self, id: KeyId) -> KeyId {
        renamed(&self.keys, id)
    }
}

fn renamed(map: &[u32], id: u32) -> u32 {
    if id == NONE {
        NONE
    } else {
        map[id as usize]
    }
}
