//! The compact index of a trace: only the events a pass may change or whose lane
//! matters, in the fields the passes read, plus the lanes of everything else.

use std::collections::HashSet;

use crate::key::{Key, Keys, Num, Strings};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cat {
    Kernel,
    Memcpy,
    Memset,
    UserAnnotation,
    Ac2g,
    Runtime,
    Other,
}

impl Cat {
    pub fn from_name(cat: &str) -> Cat {
        match cat {
            "kernel" => Cat::Kernel,
            "gpu_memcpy" => Cat::Memcpy,
            "gpu_memset" => Cat::Memset,
            "gpu_user_annotation" => Cat::UserAnnotation,
            "ac2g" => Cat::Ac2g,
            "cuda_runtime" | "cuda_driver" => Cat::Runtime,
            _ => Cat::Other,
        }
    }

    pub fn is_work(self) -> bool {
        matches!(self, Cat::Kernel | Cat::Memcpy | Cat::Memset)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ph {
    Meta,
    FlowFinish,
    Other,
}

impl Ph {
    pub fn from_name(ph: &str) -> Ph {
        match ph {
            "M" => Ph::Meta,
            "f" => Ph::FlowFinish,
            _ => Ph::Other,
        }
    }
}

/// A field of an event: absent, a value of the expected type, or something else.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Field<T> {
    Missing,
    Value(T),
    Odd,
}

impl<T: Copy> Field<T> {
    pub fn value(self) -> Option<T> {
        match self {
            Field::Value(v) => Some(v),
            _ => None,
        }
    }
}

/// `args["graph node id"]` as the reference reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Node {
    Missing,
    Null,
    Zero,
    Id(i64),
    /// Present, not zero, and not an integer (a string, a fraction, ...).
    Other,
}

impl Node {
    /// `graph node id` not None and not 0: what `annotate_trace` processes.
    pub fn annotatable(self) -> bool {
        matches!(self, Node::Id(_) | Node::Other)
    }

    /// `args.get("graph node id", 0) != 0`: what the lane passes process.
    pub fn graphed(self) -> bool {
        !matches!(self, Node::Missing | Node::Zero)
    }

    pub fn from_key(key: Key) -> Node {
        match key {
            Key::None => Node::Null,
            Key::Int(0) => Node::Zero,
            Key::Int(i) => Node::Id(i),
            _ => Node::Other,
        }
    }
}

/// What an event says about itself, decoded from JSON or from a Python dict.
#[derive(Clone, Debug)]
pub struct Observed<'a> {
    pub ph: Ph,
    pub cat: Cat,
    pub name: Option<&'a str>,
    pub pid: Option<Key>,
    pub tid: Key,
    pub ts: Field<Num>,
    pub dur: Field<Num>,
    pub args: Field<()>,
    pub node: Node,
    pub args_stream: Option<Key>,
    /// `str(args["name"])` starts with `"stream "`.
    pub args_name_is_stream: bool,
    pub correlation: Option<i64>,
    pub grid_block: Option<[u32; 6]>,
}

impl Default for Observed<'_> {
    fn default() -> Self {
        Observed {
            ph: Ph::Other,
            cat: Cat::Other,
            name: None,
            pid: None,
            tid: Key::None,
            ts: Field::Missing,
            dur: Field::Missing,
            args: Field::Missing,
            node: Node::Missing,
            args_stream: None,
            args_name_is_stream: false,
            correlation: None,
            grid_block: None,
        }
    }
}

/// An event some pass may change, move, remove or name a lane after.
#[derive(Clone, Debug)]
pub struct Tracked {
    /// Position in `traceEvents`.
    pub ordinal: u32,
    pub cat: Cat,
    pub ph: Ph,
    pub pid: Option<Key>,
    pub tid: Key,
    pub ts: Option<Num>,
    pub dur: Num,
    /// A field the passes need has a type they cannot use: leave the event alone.
    pub odd: bool,
    pub node: Node,
    pub args_stream: Option<Key>,
    pub thread_name: bool,
    pub stream_thread_name: bool,
    pub name: u32,
    pub correlation: Option<i64>,
    pub grid_block: Option<[u32; 6]>,
    pub edit: Edit,
}

/// What the passes decided for a tracked event.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Edit {
    pub removed: bool,
    pub tid: Option<Key>,
    pub ts: Option<Num>,
    pub args_stream: Option<i64>,
    /// The node whose annotation the event carries.
    pub annotation: Option<i64>,
    /// A node id recovered for an event that had none.
    pub recovered_node: Option<i64>,
    /// For a flow-finish event: the tracked event whose final place it takes.
    pub follows: Option<u32>,
}

impl Tracked {
    pub fn current_tid(&self) -> Key {
        self.edit.tid.unwrap_or(self.tid)
    }

    pub fn current_ts(&self) -> Option<Num> {
        self.edit.ts.or(self.ts)
    }

    pub fn current_node(&self) -> Node {
        match self.edit.recovered_node {
            Some(id) => Node::Id(id),
            None => self.node,
        }
    }

    pub fn is_flow_finish(&self) -> bool {
        self.cat == Cat::Ac2g && self.ph == Ph::FlowFinish
    }

    /// Whether the edit changes anything that JSON would show.
    pub fn changes_output(&self) -> bool {
        let e = &self.edit;
        e.removed
            || e.annotation.is_some()
            || e.recovered_node.is_some()
            || e.tid.is_some_and(|t| t != self.tid)
            || e.ts.is_some_and(|t| !self.ts.is_some_and(|old| same_num(old, t)))
            || e.args_stream.is_some_and(|s| self.args_stream != Some(Key::Int(s)))
    }
}

/// The index built in one pass over a trace.
#[derive(Default, Debug)]
pub struct TraceIndex {
    pub events: Vec<Tracked>,
    /// Lanes of the untracked events that are not metadata.
    pub untracked_tids: HashSet<Key>,
    /// Correlation ids of `cudaGraphLaunch` calls.
    pub graph_launches: HashSet<i64>,
    pub keys: Keys,
    pub names: Strings,
    pub event_count: u64,
}

impl TraceIndex {
    /// Record one event of `traceEvents`; returns the index of its tracked entry.
    pub fn observe(&mut self, ordinal: u32, ev: &Observed<'_>) -> Option<usize> {
        self.event_count += 1;
        if ev.cat == Cat::Runtime && ev.name.is_some_and(is_graph_launch) {
            if let Some(c) = ev.correlation {
                self.graph_launches.insert(c);
            }
        }
        let tracked = ev.node != Node::Missing
            || ev.cat.is_work()
            || ev.cat == Cat::UserAnnotation
            || (ev.cat == Cat::Ac2g && ev.ph == Ph::FlowFinish)
            || ev.ph == Ph::Meta;
        if !tracked {
            self.untracked_tids.insert(ev.tid);
            return None;
        }
        let odd = ev.args == Field::Odd || ev.ts.value().is_none() || ev.dur == Field::Odd;
        let thread_name = ev.ph == Ph::Meta && ev.name == Some("thread_name");
        let name = match ev.name {
            Some(n) if ev.cat.is_work() || ev.node != Node::Missing => self.names.intern(n),
            _ => u32::MAX,
        };
        self.events.push(Tracked {
            ordinal,
            cat: ev.cat,
            ph: ev.ph,
            pid: ev.pid,
            tid: ev.tid,
            ts: ev.ts.value(),
            dur: ev.dur.value().unwrap_or(Num::ZERO),
            odd,
            node: ev.node,
            args_stream: ev.args_stream,
            thread_name,
            stream_thread_name: thread_name && ev.args_name_is_stream,
            name,
            correlation: ev.correlation,
            grid_block: ev.grid_block,
            edit: Edit::default(),
        });
        Some(self.events.len() - 1)
    }

    pub fn name_of(&self, event: &Tracked) -> &str {
        if event.name == u32::MAX {
            "?"
        } else {
            self.names.get(event.name)
        }
    }
}

/// Whether two numbers would be written the same way.
fn same_num(a: Num, b: Num) -> bool {
    match (a, b) {
        (Num::Int(x), Num::Int(y)) => x == y,
        (Num::Float(x), Num::Float(y)) => x.to_bits() == y.to_bits(),
        _ => false,
    }
}

pub fn is_graph_launch(name: &str) -> bool {
    matches!(name, "cudaGraphLaunch" | "cudaGraphLaunch_v10000" | "cuGraphLaunch" | "cuGraphLaunch_ptsz" | "cudaGraphLaunch_ptsz")
}
