//! Pass one: stream a trace once, check that it is JSON, and build the
//! [`TraceIndex`] plus the byte layout that pass two rewrites by.

use std::path::Path;

use crate::io::Chunks;
use crate::json::{str_is, text_of, Cursor, Scalar, Scan, ScanError, StrSpan};
use crate::key::{Key, Keys, Num};
use crate::trace::{Cat, Field, Node, Observed, Ph, TraceIndex};

/// Where a tracked event sits in the (decompressed) input, for pass two.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub start: u64,
    pub end: u64,
    /// End of the element before it (its own start when it is the first).
    pub prev_end: u64,
    /// Start of the element after it (the `]` when it is the last).
    pub next_start: u64,
}

/// The byte layout of `traceEvents` in the input.
#[derive(Clone, Debug, Default)]
pub struct Layout {
    /// One span per tracked event, in the order of `TraceIndex::events`.
    pub spans: Vec<Span>,
    /// Offset of the `]` that closes `traceEvents`.
    pub array_close: u64,
    pub elements: u64,
    pub total_len: u64,
}

#[derive(Debug)]
pub enum ScanFailure {
    Io(std::io::Error),
    /// Not a trace: the message, and the byte offset in the decompressed input.
    Invalid(String, Option<u64>),
}

impl From<std::io::Error> for ScanFailure {
    fn from(e: std::io::Error) -> Self {
        ScanFailure::Io(e)
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Start,
    Member,
    EventsOpen,
    Event,
    AfterEvent,
    AfterMember,
    End,
}

/// Raw fields of one event, as spans into the window.
#[derive(Default)]
struct Raw {
    ph: Option<Scalar>,
    cat: Option<Scalar>,
    name: Option<Scalar>,
    pid: Option<Scalar>,
    tid: Option<Scalar>,
    ts: Option<Scalar>,
    dur: Option<Scalar>,
    args: Option<Scalar>,
    args_object: bool,
    gni: Option<Scalar>,
    correlation: Option<Scalar>,
    args_name: Option<Scalar>,
    args_stream: Option<Scalar>,
    grid: Option<Scalar>,
    block: Option<Scalar>,
}

fn key_bytes<'b>(buf: &'b [u8], k: StrSpan, scratch: &'b mut String) -> &'b [u8] {
    if !k.escaped {
        return &buf[k.start..k.end];
    }
    *scratch = text_of(buf, k).into_owned();
    scratch.as_bytes()
}

fn parse_event(c: &mut Cursor<'_>, raw: &mut Raw) -> Scan<()> {
    *raw = Raw::default();
    let mut scratch = String::new();
    c.object(|c, key| {
        let buf = c.buf;
        match key_bytes(buf, key, &mut scratch) {
            b"ph" => raw.ph = Some(c.scalar()?),
            b"cat" => raw.cat = Some(c.scalar()?),
            b"name" => raw.name = Some(c.scalar()?),
            b"pid" => raw.pid = Some(c.scalar()?),
            b"tid" => raw.tid = Some(c.scalar()?),
            b"ts" => raw.ts = Some(c.scalar()?),
            b"dur" => raw.dur = Some(c.scalar()?),
            b"args" => {
                raw.gni = None;
                raw.correlation = None;
                raw.args_name = None;
                raw.args_stream = None;
                raw.grid = None;
                raw.block = None;
                if c.peek()? == b'{' {
                    let start = c.pos;
                    raw.args_object = true;
                    let mut scratch = String::new();
                    c.object(|c, key| {
                        let buf = c.buf;
                        match key_bytes(buf, key, &mut scratch) {
                            b"graph node id" => raw.gni = Some(c.scalar()?),
                            b"correlation" => raw.correlation = Some(c.scalar()?),
                            b"name" => raw.args_name = Some(c.scalar()?),
                            b"stream" => raw.args_stream = Some(c.scalar()?),
                            b"grid" => raw.grid = Some(c.scalar()?),
                            b"block" => raw.block = Some(c.scalar()?),
                            _ => c.skip_value()?,
                        }
                        Ok(())
                    })?;
                    raw.args = Some(Scalar::Container { start, end: c.pos });
                } else {
                    raw.args_object = false;
                    raw.args = Some(c.scalar()?);
                }
            }
            _ => c.skip_value()?,
        }
        Ok(())
    })
}

fn is(buf: &[u8], s: Option<Scalar>, want: &str) -> bool {
    matches!(s, Some(Scalar::Str(span)) if str_is(buf, span, want))
}

fn num(buf: &[u8], s: Scalar) -> Option<Num> {
    match s {
        Scalar::Number { start, end } => Num::parse(&buf[start..end]),
        _ => None,
    }
}

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

fn field(buf: &[u8], s: Option<Scalar>) -> Field<Num> {
    match s {
        None => Field::Missing,
        Some(s) => num(buf, s).map_or(Field::Odd, Field::Value),
    }
}

fn node(buf: &[u8], s: Option<Scalar>) -> Node {
    match s {
        None => Node::Missing,
        Some(Scalar::Null) => Node::Null,
        Some(Scalar::Bool(false)) => Node::Zero,
        Some(Scalar::Bool(true)) => Node::Id(1),
        Some(Scalar::Number { start, end }) => match Num::parse(&buf[start..end]) {
            Some(n) if n.as_f64() == 0.0 => Node::Zero,
            Some(n) => match Key::from_num(n) {
                Some(Key::Int(i)) => Node::Id(i),
                _ => Node::Other,
            },
            None => Node::Other,
        },
        Some(_) => Node::Other,
    }
}

fn dims(buf: &[u8], s: Option<Scalar>) -> Option<[u32; 3]> {
    let Some(Scalar::Container { start, end }) = s else { return None };
    let text = std::str::from_utf8(&buf[start..end]).ok()?;
    let inner = text.trim().strip_prefix('[')?.strip_suffix(']')?;
    let mut out = [0u32; 3];
    let mut parts = inner.split(',');
    for slot in out.iter_mut() {
        *slot = parts.next()?.trim().parse().ok()?;
    }
    parts.next().is_none().then_some(out)
}

/// Index one parsed event.
fn observe(buf: &[u8], raw: &Raw, ordinal: u32, index: &mut TraceIndex) -> Option<usize> {
    let cat = match raw.cat {
        Some(Scalar::Str(span)) if !span.escaped => Cat::from_name(std::str::from_utf8(&buf[span.start..span.end]).unwrap_or("")),
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
    let node = if raw.args_object { node(buf, raw.gni) } else { Node::Missing };
    let tracked = node != Node::Missing || cat.is_work() || cat == Cat::UserAnnotation || (cat == Cat::Ac2g && ph == Ph::FlowFinish) || ph == Ph::Meta || cat == Cat::Runtime;
    let tid = key(buf, raw.tid, &mut index.keys);
    if !tracked {
        index.event_count += 1;
        index.untracked_tids.insert(tid);
        return None;
    }
    let name_text = match raw.name {
        Some(Scalar::Str(span)) => Some(text_of(buf, span)),
        _ => None,
    };
    let obs = Observed {
        ph,
        cat,
        name: name_text.as_deref(),
        pid: raw.pid.map(|p| key(buf, Some(p), &mut index.keys)),
        tid,
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

/// Read the whole trace once. `progress(file_bytes_read, file_len)` is called per chunk.
pub fn scan(path: &Path, progress: &mut dyn FnMut(u64, u64)) -> Result<(TraceIndex, Layout), ScanFailure> {
    let mut chunks = Chunks::open(path)?;
    let mut index = TraceIndex::default();
    let mut layout = Layout::default();
    let mut buf: Vec<u8> = Vec::with_capacity(8 << 20);
    let mut base: u64 = 0; // offset of buf[0] in the input
    let mut pos: usize = 0; // where the next step starts in buf
    let mut eof = false;
    let mut state = State::Start;
    let mut saw_events = false;
    let mut raw = Raw::default();
    let mut prev_end: Option<u64> = None;
    let mut last_tracked_is_prev = false;

    loop {
        let mut c = Cursor::new(&buf, pos);
        let step: Scan<()> = loop {
            pos = c.pos;
            let r: Scan<()> = (|| {
                match state {
                    State::Start => {
                        c.expect(b'{', "a JSON object (a trace starts with '{')")?;
                        state = if c.peek()? == b'}' {
                            c.pos += 1;
                            State::End
                        } else {
                            State::Member
                        };
                    }
                    State::Member => {
                        let k = c.string()?;
                        c.expect(b':', "':'")?;
                        if str_is(c.buf, k, "traceEvents") {
                            if saw_events {
                                return Err(ScanError::Syntax { at: k.start, expected: "a single traceEvents" });
                            }
                            saw_events = true;
                            if c.peek()? != b'[' {
                                return Err(ScanError::Syntax { at: c.pos, expected: "a list for traceEvents" });
                            }
                            state = State::EventsOpen;
                        } else {
                            c.skip_value()?;
                            state = State::AfterMember;
                        }
                    }
                    State::EventsOpen => {
                        c.expect(b'[', "'['")?;
                        if c.peek()? == b']' {
                            layout.array_close = base + c.pos as u64;
                            c.pos += 1;
                            state = State::AfterMember;
                        } else {
                            state = State::Event;
                        }
                    }
                    State::Event => {
                        let start = c.peek().map(|_| c.pos)?;
                        let abs_start = base + start as u64;
                        if last_tracked_is_prev {
                            layout.spans.last_mut().expect("tracked").next_start = abs_start;
                        }
                        let tracked = if c.buf[start] == b'{' {
                            parse_event(&mut c, &mut raw)?;
                            observe(c.buf, &raw, layout.elements as u32, &mut index)
                        } else {
                            c.skip_value()?;
                            index.event_count += 1;
                            None
                        };
                        let abs_end = base + c.pos as u64;
                        if tracked.is_some() {
                            layout.spans.push(Span { start: abs_start, end: abs_end, prev_end: prev_end.unwrap_or(abs_start), next_start: abs_end });
                        }
                        last_tracked_is_prev = tracked.is_some();
                        prev_end = Some(abs_end);
                        layout.elements += 1;
                        state = State::AfterEvent;
                    }
                    State::AfterEvent => match c.peek()? {
                        b',' => {
                            c.pos += 1;
                            state = State::Event;
                        }
                        b']' => {
                            layout.array_close = base + c.pos as u64;
                            if last_tracked_is_prev {
                                layout.spans.last_mut().expect("tracked").next_start = layout.array_close;
                            }
                            c.pos += 1;
                            state = State::AfterMember;
                        }
                        _ => return Err(ScanError::Syntax { at: c.pos, expected: "',' or ']' between events" }),
                    },
                    State::AfterMember => match c.peek()? {
                        b',' => {
                            c.pos += 1;
                            state = State::Member;
                        }
                        b'}' => {
                            c.pos += 1;
                            state = State::End;
                        }
                        _ => return Err(ScanError::Syntax { at: c.pos, expected: "',' or '}'" }),
                    },
                    State::End => {
                        c.peek()?;
                        return Err(ScanError::Syntax { at: c.pos, expected: "the end of the file after the trace object" });
                    }
                }
                Ok(())
            })();
            if let Err(e) = r {
                break Err(e);
            }
        };
        match step {
            Ok(()) => unreachable!("the step loop only ends with an error"),
            Err(ScanError::Syntax { at, expected }) => {
                return Err(ScanFailure::Invalid(format!("not a valid trace: expected {expected}"), Some(base + at as u64)));
            }
            Err(ScanError::Incomplete) if eof => {
                if state == State::End {
                    break;
                }
                let at = base + buf.len() as u64;
                let what = if at == 0 { "the file is empty".to_string() } else { "the trace is truncated (unexpected end of input)".to_string() };
                return Err(ScanFailure::Invalid(what, Some(at)));
            }
            Err(ScanError::Incomplete) => {
                buf.drain(..pos);
                base += pos as u64;
                pos = 0;
                if chunks.fill(&mut buf)? == 0 {
                    eof = true;
                }
                progress(chunks.file_position(), chunks.file_len);
            }
        }
    }
    if !saw_events {
        return Err(ScanFailure::Invalid("the trace has no traceEvents".into(), None));
    }
    layout.total_len = base + buf.len() as u64;
    Ok((index, layout))
}
