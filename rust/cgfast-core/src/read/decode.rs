//! An event's fields as the index takes them, decoded from the JSON scalars the field
//! reader found ([`crate::read::event_fields`]).

use crate::index::keys::{Key, Keys, Num, Spelling};
use crate::index::{Cat, Field, Kept, Node, Ph, ReplayMarker, TraceIndex, STAMP_PREFIX};
use crate::json::{str_is, text_of, Scalar};
use crate::read::event_fields::Raw;
use crate::read::ingest::{is_tracked, Observed};
use crate::read::layout::{Places, Rel};

#[inline(always)]
fn is(buf: &[u8], s: Option<Scalar>, want: &str) -> bool {
    matches!(s, Some(Scalar::Str(span)) if str_is(buf, span, want))
}

#[inline(always)]
fn num(buf: &[u8], s: Scalar) -> Option<Num> {
    match s {
        Scalar::Number { start, end } => Num::parse(&buf[start..end]),
        _ => None,
    }
}

#[inline(always)]
fn key(buf: &[u8], s: Option<Scalar>, keys: &mut Keys) -> Key {
    match s {
        None | Some(Scalar::Null) => Key::None,
        Some(Scalar::Bool(b)) => Key::Int(b as i64),
        Some(Scalar::Number { start, end }) => match Num::parse(&buf[start..end]) {
            Some(n) => keys.num(n),
            None => keys.unique(),
        },
        Some(Scalar::Str(span)) => keys.string(&text_of(buf, span)),
        Some(Scalar::Container { .. }) => keys.unique(),
    }
}

/// A key and how its value was written, where the key does not show it.
#[inline(always)]
fn spelled_key(buf: &[u8], s: Option<Scalar>, keys: &mut Keys) -> (Key, Spelling) {
    match s {
        Some(Scalar::Bool(b)) => (Key::Int(b as i64), Spelling::Bool),
        Some(Scalar::Number { start, end }) => match Num::parse(&buf[start..end]) {
            Some(n) => (keys.num(n), Spelling::of_num(n)),
            None => (keys.unique(), Spelling::Plain),
        },
        _ => (key(buf, s, keys), Spelling::Plain),
    }
}

#[inline(always)]
fn field(buf: &[u8], s: Option<Scalar>) -> Field<Num> {
    match s {
        None => Field::Missing,
        Some(s) => num(buf, s).map_or(Field::Odd, Field::Value),
    }
}

/// `args["graph node id"]` and, where torch 2.15 split it, `args["graph id"]`, as one node.
#[inline(always)]
pub(crate) fn node_of(buf: &[u8], node_id: Option<Scalar>, graph_id: Option<Scalar>) -> Node {
    let node = node(buf, node_id);
    match graph_id {
        None => node,
        Some(g) => node.joined(num(buf, g).and_then(|n| match n {
            Num::Int(i) => Some(i),
            _ => None,
        })),
    }
}

#[inline(always)]
fn node(buf: &[u8], s: Option<Scalar>) -> Node {
    match s {
        None => Node::Missing,
        Some(Scalar::Null) => Node::Null,
        Some(Scalar::Bool(false)) => Node::Zero,
        Some(Scalar::Bool(true)) => Node::Id(1),
        Some(Scalar::Number { start, end }) => match Num::parse(&buf[start..end]) {
            Some(n) => Node::of_num(n),
            None => std::str::from_utf8(&buf[start..end])
                .ok()
                .and_then(|t| t.parse::<crate::index::NodeId>().ok())
                .map_or(Node::Other, Node::Id),
        },
        Some(_) => Node::Other,
    }
}

#[inline(always)]
fn dims(buf: &[u8], s: Option<Scalar>) -> Option<[u32; 3]> {
    let Some(Scalar::Container { start, end }) = s else { return None };
    let bytes = &buf[start..end];
    if bytes.first() != Some(&b'[') {
        return None;
    }
    let mut out = [0u32; 3];
    let mut n = 0;
    let mut value: Option<u32> = None;
    for &b in &bytes[1..] {
        match b {
            b'0'..=b'9' => value = Some(value.unwrap_or(0).checked_mul(10)?.checked_add((b - b'0') as u32)?),
            b',' | b']' => {
                *out.get_mut(n)? = value.take()?;
                n += 1;
                if b == b']' {
                    break;
                }
            }
            b' ' | b'\n' | b'\r' | b'\t' => {}
            _ => return None,
        }
    }
    (n == 3).then_some(out)
}

/// Whether a CPU range's name starts like a replay stamp's.
#[inline(never)]
fn names_a_stamp(buf: &[u8], name: Option<Scalar>) -> bool {
    match name {
        Some(Scalar::Str(span)) if !span.escaped => {
            buf[span.start..span.end].starts_with(STAMP_PREFIX.as_bytes())
        }
        Some(Scalar::Str(span)) => text_of(buf, span).starts_with(STAMP_PREFIX),
        _ => false,
    }
}

/// Index one parsed event.
pub(crate) fn observe(buf: &[u8], raw: &Raw, ordinal: u32, index: &mut TraceIndex) -> Kept {
    let cat = match raw.cat {
        Some(Scalar::Str(span)) if !span.escaped => Cat::from_bytes(&buf[span.start..span.end]),
        Some(Scalar::Str(span)) => Cat::from_name(&text_of(buf, span)),
        _ => Cat::Other,
    };
    let ph = if is(buf, raw.ph, "M") {
        Ph::Meta
    } else if is(buf, raw.ph, "f") {
        Ph::FlowFinish
    } else {
        Ph::Other
    };
    let node = if raw.args_object { node_of(buf, raw.gni, raw.graph_id) } else { Node::Missing };
    index.split_ids |= raw.args_object && raw.graph_id.is_some();
    let (tid, tid_spelling) = spelled_key(buf, raw.tid, &mut index.keys);
    if !(is_tracked(cat, ph, node) || (cat == Cat::CpuAnnotation && names_a_stamp(buf, raw.name))) {
        index.event_count += 1;
        let id = index.keys.id(tid);
        index.use_lane(id);
        return Kept::Lane;
    }
    let name_text = match raw.name {
        Some(Scalar::Str(span)) => Some(text_of(buf, span)),
        _ => None,
    };
    let (pid, pid_spelling) = match raw.pid {
        Some(p) => {
            let (key, spelling) = spelled_key(buf, Some(p), &mut index.keys);
            (Some(key), spelling)
        }
        None => (None, Spelling::Plain),
    };
    let obs = Observed {
        ph,
        cat,
        name: name_text.as_deref(),
        pid,
        tid,
        pid_spelling,
        tid_spelling,
        ts: field(buf, raw.ts),
        dur: field(buf, raw.dur),
        args: match raw.args {
            None => Field::Missing,
            Some(_) if raw.args_object => Field::Value(()),
            Some(_) => Field::Odd,
        },
        node,
        args_stream: raw.args_stream.map(|s| key(buf, Some(s), &mut index.keys)),
        args_name_is_stream: matches!(raw.args_name, Some(Scalar::Str(span)) if text_of(buf, span).starts_with("stream ")),
        scope_span: matches!(raw.args_cgfast, Some(Scalar::Str(span)) if text_of(buf, span) == "scope"),
        moved_earlier: raw.original_stream,
        replay_marker: match raw.args_cgfast {
            Some(Scalar::Str(span)) => ReplayMarker::from_text(&text_of(buf, span)),
            _ => ReplayMarker::None,
        },
        correlation: raw.correlation.and_then(|s| num(buf, s)).and_then(|n| match n {
            Num::Int(i) => Some(i),
            _ => None,
        }),
        grid_block: match (dims(buf, raw.grid), dims(buf, raw.block)) {
            (Some([a, b, c]), Some([d, e, f])) => Some([a, b, c, d, e, f]),
            _ => None,
        },
    };
    index.observe(ordinal, &obs)
}

/// Where pass two splices the edits of the event at `start..end`.
pub(crate) fn places(raw: &Raw, start: usize, end: usize) -> Places {
    if end - start >= u16::MAX as usize || raw.args_conflict {
        return Places::INEXACT;
    }
    let rel = |at| Rel::of(at, start);
    match (rel(raw.tid_at), rel(raw.ts_at), rel(raw.stream_at), rel(raw.node_at)) {
        (Some(tid), Some(ts), Some(stream), Some(node)) => Places {
            tid,
            ts,
            stream,
            node,
            args_close: raw.args_close.map_or(u16::MAX, |c| (c - start) as u16),
            args_empty: raw.args_empty,
            exact: true,
        },
        _ => Places::INEXACT,
    }
}
