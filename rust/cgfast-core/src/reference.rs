//! The reference's three passes (torch's `torch/cuda/_annotate_cuda_graph_trace.py`:
//! `annotate_trace`, `_move_overlapping_to_stream` and `_fix_overlapping_timestamps`)
//! on a trace whose events the caller holds, as the Python bindings hold a
//! `json.load`ed dict.
//!
//! The caller hands over each element of `traceEvents` in order ([`Trace::push`]) with
//! the fields the passes read ([`Event`]), in values that compare as Python compares
//! them ([`Scalar`]); a pass decides on them, and the caller writes the decisions back
//! into its own events: the lanes and annotations of [`Trace::relaned`], the flows of
//! [`Trace::flows_moved`], the elements of [`Trace::removed`], the starts of
//! [`Trace::retimed`]. Where the reference's Python would fail, a lane pass decides
//! nothing and says why ([`Refused`]).

use std::borrow::Cow;

use crate::index::keys::{Key, Keys, Num, Spelling};
use crate::index::{Cat, Field, Node, Ph, ReplayMarker, TraceIndex, NONE};
use crate::passes::{self, FlowLink, Lookup, OddEvents};
use crate::read::ingest::Observed;
use crate::NodeId;

/// A value of an event's field, under Python's equality (`7 == 7.0 == True`).
#[derive(Clone, Debug, PartialEq)]
pub enum Scalar<'a> {
    /// `None`.
    None,
    /// `True` or `False` (equal to 1 and 0).
    Bool(bool),
    /// An integer within 64 bits.
    Int(i64),
    /// An integer beyond 64 bits, as its decimal digits.
    BigInt(Cow<'a, str>),
    /// A float.
    Float(f64),
    /// A string.
    Str(Cow<'a, str>),
    /// Anything else (a list, a dict, an object): equal to nothing.
    Other,
}

/// An event's `args`, as far as the passes read it.
#[derive(Clone, Debug, PartialEq)]
pub enum Args<'a> {
    /// The event has no `args`.
    Missing,
    /// Its `args` is not a dict.
    NotADict,
    /// Its `args` is a dict with these.
    Dict {
        /// `args["graph node id"]`, if present.
        node: Option<Scalar<'a>>,
        /// `args["stream"]`, if present.
        stream: Option<Scalar<'a>>,
        /// Whether `str(args["name"])` starts with `"stream "`.
        name_is_stream: bool,
    },
}

/// What the passes read of one event (a dict); `None` for a field that is absent.
#[derive(Clone, Debug, PartialEq)]
pub struct Event<'a> {
    /// `ph`, where it is a string.
    pub ph: Option<&'a str>,
    /// `cat`, where it is a string.
    pub cat: Option<&'a str>,
    /// `name`, where it is a string.
    pub name: Option<&'a str>,
    /// `pid`.
    pub pid: Option<Scalar<'a>>,
    /// `tid` (`Scalar::None` where absent: `event.get("tid")`).
    pub tid: Scalar<'a>,
    /// `ts`.
    pub ts: Option<Scalar<'a>>,
    /// `dur`.
    pub dur: Option<Scalar<'a>>,
    /// `args`.
    pub args: Args<'a>,
}

/// Whether events of category `cat` are GPU work (a kernel, memcpy or memset): the
/// events `_fix_overlapping_timestamps` orders.
pub fn is_work(cat: &str) -> bool {
    Cat::from_name(cat).is_work()
}

/// A trace's events, in `traceEvents` order, and what the passes decided on them.
#[derive(Debug, Default)]
pub struct Trace {
    index: TraceIndex,
    elements: u32,
}

/// What [`Trace::annotate`] did.
#[derive(Clone, Debug, PartialEq)]
pub struct Annotated {
    /// Events annotated.
    pub annotated: u64,
    /// Events removed as replicated noise (see [`Trace::removed`]).
    pub noise_removed: u64,
    /// The element whose `pid` is the GPU process's (the first surviving `thread_name`
    /// of a `stream ...` lane), if any: the `pid` of the lanes' new `thread_name` events
    /// (0 without one).
    pub gpu_pid_from: Option<u32>,
    /// The lanes that get a new `thread_name` event, in order, as their first work
    /// event writes their `tid`.
    pub named_lanes: Vec<Scalar<'static>>,
}

/// An event a pass moved to a lane.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Relaned {
    /// Its position in `traceEvents`.
    pub ordinal: u32,
    /// Its lane: its `tid` and `args["stream"]`.
    pub stream: i64,
    /// The node whose annotation it gets, if any.
    pub annotation: Option<NodeId>,
}

/// Where the reference's Python would fail on a trace, raising before changing it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refused {
    /// The position in `traceEvents` of the event it fails on.
    pub ordinal: u32,
    /// Why.
    pub why: Refusal,
}

/// Why the reference fails on an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// It has no `ts` (`KeyError`).
    NoTs,
    /// Its `ts` is not a number (`TypeError`, or `OverflowError` beyond 64 bits).
    TsNotANumber,
    /// Its `dur` is not a number (likewise).
    DurNotANumber,
}

/// What [`Trace::fix_overlapping_timestamps`] did.
#[derive(Clone, Debug, PartialEq)]
pub struct Fixed {
    /// Events moved to start where the previous one ends (see [`Trace::retimed`]).
    pub fixed: u64,
    /// The overlaps too large to repair, left as they are (the reference prints them).
    pub large: Vec<LargeOverlap>,
}

/// An overlap too large to be timestamp jitter.
#[derive(Clone, Debug, PartialEq)]
pub struct LargeOverlap {
    /// The event's position in `traceEvents`.
    pub ordinal: u32,
    /// Its lane.
    pub lane: Scalar<'static>,
    /// How far it starts before the previous event ends, in microseconds.
    pub overlap_us: f64,
}

impl Trace {
    /// A trace of no events yet.
    pub fn new() -> Trace {
        Trace::default()
    }

    /// The next element of `traceEvents`: an event, or `None` for an element that is
    /// not a dict.
    pub fn push(&mut self, event: Option<&Event<'_>>) {
        let ordinal = self.elements;
        self.elements += 1;
        let Some(event) = event else {
            self.index.event_count += 1;
            return;
        };
        let keys = &mut self.index.keys;
        let (node, args_stream, args_name_is_stream) = match &event.args {
            Args::Dict { node, stream, name_is_stream } => {
                (node_of(node.as_ref()), stream.as_ref().map(|s| key(s, keys)), *name_is_stream)
            }
            _ => (Node::Missing, None, false),
        };
        let observed = Observed {
            ph: event.ph.map_or(Ph::Other, Ph::from_name),
            cat: event.cat.map_or(Cat::Other, Cat::from_name),
            name: event.name,
            pid: event.pid.as_ref().map(|p| key(p, keys)),
            tid: key(&event.tid, keys),
            pid_spelling: event.pid.as_ref().map_or(Spelling::Plain, spelling),
            tid_spelling: spelling(&event.tid),
            ts: field(event.ts.as_ref()),
            dur: field(event.dur.as_ref()),
            args: match event.args {
                Args::Missing => Field::Missing,
                Args::Dict { .. } => Field::Value(()),
                Args::NotADict => Field::Odd,
            },
            node,
            args_stream,
            args_name_is_stream,
            scope_span: false,
            moved_earlier: false,
            replay_marker: ReplayMarker::None,
            correlation: None,
            grid_block: None,
        };
        let kept = self.index.observe(ordinal, &observed);
        if observed.ts.value().is_none() {
            // the reference's flow index takes any `event.get("ts")` as it is
            let ts = match &event.ts {
                // equal ints beyond 64 bits are one key: their digits, marked apart from
                // strings by a control character no trace writes
                Some(Scalar::BigInt(digits)) => self.index.keys.string(&format!("\u{1}int {digits}")),
                Some(ts) => key(ts, &mut self.index.keys),
                None => Key::None,
            };
            self.index.set_odd_ts_key(kept, ts);
        }
    }

    /// The node ids the events carry (those an annotation may be looked up for).
    pub fn nodes(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.index.events.iter().filter_map(|e| match e.node() {
            Node::Id(node) => Some(node),
            _ => None,
        })
    }

    /// `annotate_trace`: every event whose node `lane_of` knows is annotated and moves
    /// to the lane its annotation asks for (`Some(Some(stream))`) or to
    /// `default_stream`; flow events at its `(tid, ts)` follow it; `gpu_user_annotation`
    /// and flow events left on lanes without work are removed; work lanes without a
    /// `thread_name` get one.
    pub fn annotate(
        &mut self,
        lane_of: impl Fn(NodeId) -> Option<Option<i64>>,
        default_stream: i64,
    ) -> Annotated {
        let outcome = passes::annotate(&mut self.index, &LaneOf(lane_of), default_stream, FlowLink::AtTidTs);
        let keys = &self.index.keys;
        Annotated {
            annotated: outcome.annotated,
            noise_removed: outcome.noise_removed,
            gpu_pid_from: outcome.gpu_pid_event.map(|i| self.index.events[i].ordinal),
            named_lanes: outcome
                .named_lanes
                .iter()
                .map(|&(lane, s)| spelled(keys.key(lane), s, keys))
                .collect(),
        }
    }

    /// `_move_overlapping_to_stream`: graphed kernels on `default_stream` that start
    /// before the previous one ended move to `overlap_stream`. How many moved.
    pub fn move_overlapping_to_stream(
        &mut self,
        default_stream: i64,
        overlap_stream: i64,
    ) -> Result<u64, Refused> {
        passes::move_overlapping_or_refuse(&mut self.index, default_stream, overlap_stream, OddEvents::Refuse)
            .map_err(|refused| self.refused(refused))
    }

    /// `_fix_overlapping_timestamps`: on each lane, a graphed work event that starts at
    /// most `max_adjust_us` before the previous one ends is moved to that end.
    pub fn fix_overlapping_timestamps(&mut self, max_adjust_us: f64) -> Result<Fixed, Refused> {
        let fixed = passes::fix_timestamps_or_refuse(&mut self.index, max_adjust_us, OddEvents::Refuse)
            .map_err(|refused| self.refused(refused))?;
        let keys = &self.index.keys;
        let large = fixed
            .large
            .iter()
            .map(|l| LargeOverlap {
                ordinal: self.index.events[l.event].ordinal,
                lane: spelled(keys.key(l.tid), Spelling::Plain, keys),
                overlap_us: l.overlap_us,
            })
            .collect();
        Ok(Fixed { fixed: fixed.fixed, large })
    }

    /// The events a pass put on a lane, in order.
    pub fn relaned(&self) -> impl Iterator<Item = Relaned> + '_ {
        self.index.events.iter().filter_map(|e| {
            let stream = e.new_stream(&self.index.keys)?;
            Some(Relaned { ordinal: e.ordinal, stream, annotation: e.annotation() })
        })
    }

    /// The flow events that moved with their event: their position and new `tid`.
    pub fn flows_moved(&self) -> impl Iterator<Item = (u32, Scalar<'static>)> + '_ {
        let keys = &self.index.keys;
        self.index
            .flows
            .iter()
            .filter(|f| f.new_tid != NONE)
            .map(|f| (f.ordinal, spelled(keys.key(f.new_tid), Spelling::Plain, keys)))
    }

    /// The positions of the elements removed, in no particular order.
    pub fn removed(&self) -> impl Iterator<Item = u32> + '_ {
        let events = self.index.events.iter().filter(|e| e.removed()).map(|e| e.ordinal);
        events.chain(self.index.flows.iter().filter(|f| f.removed()).map(|f| f.ordinal))
    }

    /// The events given a new `ts`, with it (an `Int` or a `Float`).
    pub fn retimed(&self) -> impl Iterator<Item = (u32, Scalar<'static>)> + '_ {
        self.index.events.iter().filter_map(|e| {
            let ts = match e.new_ts()? {
                Num::Int(i) => Scalar::Int(i),
                Num::Float(f) => Scalar::Float(f),
            };
            Some((e.ordinal, ts))
        })
    }

    fn refused(&self, refused: passes::Refused) -> Refused {
        let why = match refused.why {
            passes::Refusal::NoTs => Refusal::NoTs,
            passes::Refusal::TsNotANumber => Refusal::TsNotANumber,
            passes::Refusal::DurNotANumber => Refusal::DurNotANumber,
        };
        Refused { ordinal: self.index.events[refused.event].ordinal, why }
    }
}

/// The annotations a pass looks up, as the caller's function of a node id.
struct LaneOf<F>(F);

impl<F: Fn(NodeId) -> Option<Option<i64>>> Lookup for LaneOf<F> {
    fn stream_of(&self, node: NodeId) -> Option<Option<i64>> {
        (self.0)(node)
    }
}

/// A number as the passes read it (`bool` is an int).
fn num(value: &Scalar<'_>) -> Option<Num> {
    match value {
        Scalar::Bool(b) => Some(Num::Int(*b as i64)),
        Scalar::Int(i) => Some(Num::Int(*i)),
        Scalar::Float(f) => Some(Num::Float(*f)),
        _ => None,
    }
}

/// A hashable value as a key of the trace's table: strings by their text, anything
/// else that is not a number equal only to itself (an int beyond 64 bits too).
fn key(value: &Scalar<'_>, keys: &mut Keys) -> Key {
    match value {
        Scalar::None => Key::None,
        Scalar::Str(text) => keys.string(text),
        other => match num(other) {
            Some(n) => keys.num(n),
            None => keys.unique(),
        },
    }
}

fn spelling(value: &Scalar<'_>) -> Spelling {
    match value {
        Scalar::Bool(_) => Spelling::Bool,
        Scalar::Float(_) => Spelling::Float,
        _ => Spelling::Plain,
    }
}

fn field(value: Option<&Scalar<'_>>) -> Field<Num> {
    match value {
        None => Field::Missing,
        Some(v) => num(v).map_or(Field::Odd, Field::Value),
    }
}

/// `args["graph node id"]` as the reference reads it.
fn node_of(value: Option<&Scalar<'_>>) -> Node {
    match value {
        None => Node::Missing,
        Some(Scalar::None) => Node::Null,
        Some(Scalar::BigInt(digits)) => digits.parse::<NodeId>().map_or(Node::Other, Node::Id),
        Some(other) => num(other).map_or(Node::Other, Node::of_num),
    }
}

/// A key as the value Python wrote (`7`, `7.0` or `True`); a key equal to nothing as NaN.
fn spelled(key: Key, spelling: Spelling, keys: &Keys) -> Scalar<'static> {
    match (key, spelling) {
        (Key::Int(i), Spelling::Float) => Scalar::Float(i as f64),
        (Key::Int(i), Spelling::Bool) => Scalar::Bool(i != 0),
        (Key::None, _) => Scalar::None,
        (Key::Int(i), _) => Scalar::Int(i),
        (Key::Float(bits), _) => Scalar::Float(f64::from_bits(bits)),
        (Key::Str(_), _) => Scalar::Str(Cow::Owned(keys.py_str(key))),
        (Key::Unique(_), _) => Scalar::Float(f64::NAN),
    }
}
