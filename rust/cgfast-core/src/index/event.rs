//! What an event is to the passes: its category, phase and node, and the fields a
//! pass reads, each missing, of the expected type, or something else.

use crate::index::keys::{Key, Num};

/// No id: a missing key, name, shape or link.
pub(crate) const NONE: u32 = u32::MAX;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Cat {
    Kernel,
    Memcpy,
    Memset,
    UserAnnotation,
    /// A CPU-side `record_function` range (`user_annotation`): only replay stamps are kept.
    CpuAnnotation,
    Ac2g,
    Runtime,
    Other,
}

impl Cat {
    pub(crate) fn from_name(cat: &str) -> Cat {
        Cat::from_bytes(cat.as_bytes())
    }

    pub(crate) fn from_bytes(cat: &[u8]) -> Cat {
        match cat {
            b"kernel" => Cat::Kernel,
            b"gpu_memcpy" => Cat::Memcpy,
            b"gpu_memset" => Cat::Memset,
            b"gpu_user_annotation" => Cat::UserAnnotation,
            b"user_annotation" => Cat::CpuAnnotation,
            b"ac2g" => Cat::Ac2g,
            b"cuda_runtime" | b"cuda_driver" => Cat::Runtime,
            _ => Cat::Other,
        }
    }

    pub(crate) fn is_work(self) -> bool {
        matches!(self, Cat::Kernel | Cat::Memcpy | Cat::Memset)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Ph {
    Meta,
    FlowFinish,
    Other,
}

impl Ph {
    pub(crate) fn from_name(ph: &str) -> Ph {
        match ph {
            "M" => Ph::Meta,
            "f" => Ph::FlowFinish,
            _ => Ph::Other,
        }
    }
}

/// A field of an event: absent, a value of the expected type, or something else.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Field<T> {
    Missing,
    Value(T),
    Odd,
}

impl<T: Copy> Field<T> {
    pub(crate) fn value(self) -> Option<T> {
        match self {
            Field::Value(v) => Some(v),
            _ => None,
        }
    }
}

/// A graph node id: `graph_id << 32 | local_id`, unsigned 64 bits in practice; wider so
/// that any integer a trace or an annotation file holds compares as Python compares it.
pub type NodeId = i128;

/// `args["graph node id"]` as the reference reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Node {
    Missing,
    Null,
    Zero,
    Id(NodeId),
    /// Present, not zero, and not an integer (a string, a fraction, ...).
    Other,
}

impl Node {
    /// A `graph node id` that is a number within 64 bits (an integer beyond them is
    /// `Node::Id` of its exact value, read by the caller, as Python compares it).
    pub(crate) fn of_num(n: Num) -> Node {
        if n.as_f64() == 0.0 {
            return Node::Zero;
        }
        match Key::from_num(n) {
            Some(Key::Int(i)) => Node::Id(i as NodeId),
            _ => Node::Other,
        }
    }

    /// `graph node id` not None and not 0: what `annotate_trace` processes.
    pub(crate) fn annotatable(self) -> bool {
        matches!(self, Node::Id(_) | Node::Other)
    }

    /// `args.get("graph node id", 0) != 0`: what the lane passes process.
    pub(crate) fn graphed(self) -> bool {
        !matches!(self, Node::Missing | Node::Zero)
    }

    /// The node of a split pair, as torch 2.15's Cuspy profiler writes them: `"graph id"`
    /// G beside a local `"graph node id"` below 2^32 (0 for a graph's first node) stand
    /// for `G << 32 | local`. Anything else stays as it is.
    pub(crate) fn joined(self, graph_id: Option<i64>) -> Node {
        match (self, graph_id) {
            (Node::Zero, Some(g)) if g > 0 => Node::Id((g as NodeId) << 32),
            (Node::Id(local), Some(g)) if g > 0 && (0..1 << 32).contains(&local) => {
                Node::Id((g as NodeId) << 32 | local)
            }
            (node, _) => node,
        }
    }
}

/// Why recovery left a graph-launched event without a node id, as annotate writes it in
/// `args["cgfast"]`, so that `cgfast summary` can tell the two apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum ReplayMarker {
    None = 0,
    /// Several recorded graphs fit its replay with differing annotations.
    Ambiguous = 1,
    /// No recorded graph fits its replay.
    Unmatched = 2,
}

impl ReplayMarker {
    pub(crate) const AMBIGUOUS: &'static str = "ambiguous replay";
    pub(crate) const UNMATCHED: &'static str = "unmatched replay";

    pub(crate) fn from_text(text: &str) -> ReplayMarker {
        match text {
            Self::AMBIGUOUS => ReplayMarker::Ambiguous,
            Self::UNMATCHED => ReplayMarker::Unmatched,
            _ => ReplayMarker::None,
        }
    }

    /// The JSON value written for it.
    pub(crate) fn json(self) -> Option<&'static str> {
        match self {
            ReplayMarker::None => None,
            ReplayMarker::Ambiguous => Some("\"ambiguous replay\""),
            ReplayMarker::Unmatched => Some("\"unmatched replay\""),
        }
    }
}

/// A number in 64 bits: an integer's own bits or a float's, `int` telling which, so
/// that integers of any size keep exact (epoch nanoseconds exceed 2**53).
pub(crate) fn pack(n: Num) -> (u64, bool) {
    match n {
        Num::Float(f) => (f.to_bits(), false),
        Num::Int(i) => (i as u64, true),
    }
}

pub(crate) fn unpack(bits: u64, int: bool) -> Num {
    if int {
        Num::Int(bits as i64)
    } else {
        Num::Float(f64::from_bits(bits))
    }
}
