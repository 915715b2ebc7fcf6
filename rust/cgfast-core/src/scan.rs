//! Pass one: stream a trace once, check that it is JSON, and build the
//! [`TraceIndex`] plus the byte layout that pass two rewrites by.

use std::path::Path;

use crate::io::Window;
use crate::json::{str_is, text_of, Cursor, Scalar, Scan, ScanError, StrSpan};
use crate::key::{Key, Keys, Num};
use crate::trace::{is_tracked, Cat, Field, Kept, Node, Observed, Ph, TraceIndex};

/// Where a tracked event sits in the (decompressed) input, for pass two.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub start: u64,
    len: u32,
    /// Bytes between the end of the element before it and its start (0 for the first).
    before: u32,
    /// Bytes between its end and the next element (or the closing `]`).
    after: u32,
}

impl Span {
    pub fn new(start: u64, end: u64, prev_end: u64) -> Span {
        Span { start, len: (end - start) as u32, before: (start - prev_end) as u32, after: 0 }
    }

    pub fn end(&self) -> u64 {
        self.start + self.len as u64
    }

    /// End of the element before it (its own start when it is the first).
    pub fn prev_end(&self) -> u64 {
        self.start - self.before as u64
    }

    /// Start of the element after it (the `]` when it is the last).
    pub fn next_start(&self) -> u64 {
        self.end() + self.after as u64
    }

    fn set_next_start(&mut self, next: u64) {
        self.after = (next - self.end()) as u32;
    }
}

/// The byte layout of `traceEvents` in the input.
#[derive(Clone, Debug, Default)]
pub struct Layout {
    /// One span per tracked event, in the order of `TraceIndex::events`.
    pub event_spans: Vec<Span>,
    /// One span per flow, in the order of `TraceIndex::flows`.
    pub flow_spans: Vec<Span>,
    /// Where to splice the edits of each tracked event, and of each flow.
    pub event_places: Vec<Places>,
    pub flow_places: Vec<Places>,
    /// Offset of the `]` that closes `traceEvents`.
    pub array_close: u64,
    pub elements: u64,
    pub total_len: u64,
}

impl Layout {
    fn set_next_start(&mut self, kept: Kept, next: u64) {
        match kept {
            Kept::Event(i) => self.event_spans[i].set_next_start(next),
            Kept::Flow(i) => self.flow_spans[i].set_next_start(next),
            Kept::Lane => {}
        }
    }
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

/// Keys that annotations may write into `args`. An event whose `args` already has one
/// is edited through a full parse in pass two; every other edit splices at the places
/// recorded here.
#[derive(Default, Debug)]
pub struct WriteKeys {
    lengths: u64,
    keys: rustc_hash::FxHashSet<Vec<u8>>,
}

impl WriteKeys {
    pub fn new<'a>(keys: impl IntoIterator<Item = &'a str>) -> WriteKeys {
        let mut w = WriteKeys::default();
        for k in keys {
            if k == "stream" || k == "graph node id" {
                continue;
            }
            w.lengths |= 1u64.checked_shl(k.len() as u32).unwrap_or(0) | if k.len() >= 63 { 1 << 63 } else { 0 };
            w.keys.insert(k.as_bytes().to_vec());
        }
        w
    }

    #[inline]
    fn contains(&self, key: &[u8]) -> bool {
        let bit = if key.len() >= 63 { 1 << 63 } else { 1u64 << key.len() };
        self.lengths & bit != 0 && self.keys.contains(key)
    }
}

/// A value's place in its event: offset and length, relative to the event's start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rel {
    pub start: u16,
    pub len: u16,
}

impl Rel {
    pub const NONE: Rel = Rel { start: u16::MAX, len: 0 };

    fn of(at: Option<(usize, usize)>, event_start: usize) -> Option<Rel> {
        match at {
            None => Some(Rel::NONE),
            Some((s, e)) => {
                let (start, len) = (s - event_start, e - s);
                (start < u16::MAX as usize && len <= u16::MAX as usize).then_some(Rel { start: start as u16, len: len as u16 })
            }
        }
    }

    pub fn is_some(self) -> bool {
        self.start != u16::MAX
    }
}

/// Where pass two splices an event's edits; `exact` is false when it must parse instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Places {
    pub tid: Rel,
    pub ts: Rel,
    pub stream: Rel,
    pub node: Rel,
    /// Offset of the `}` closing `args` (`u16::MAX` without an args object).
    pub args_close: u16,
    pub args_empty: bool,
    pub exact: bool,
}

impl Places {
    const INEXACT: Places = Places { tid: Rel::NONE, ts: Rel::NONE, stream: Rel::NONE, node: Rel::NONE, args_close: u16::MAX, args_empty: false, exact: false };
}

/// Raw fields of one event, as spans into the window.
#[derive(Default)]
struct Raw {
    tid_at: Option<(usize, usize)>,
    ts_at: Option<(usize, usize)>,
    stream_at: Option<(usize, usize)>,
    node_at: Option<(usize, usize)>,
    args_close: Option<usize>,
    args_empty: bool,
    args_conflict: bool,
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

/// A scalar and where it is in the window.
#[inline]
fn spanned(c: &mut Cursor<'_>) -> Scan<(Scalar, (usize, usize))> {
    c.peek()?;
    let start = c.pos;
    let v = c.scalar()?;
    Ok((v, (start, c.pos)))
}

fn parse_event(c: &mut Cursor<'_>, raw: &mut Raw, write_keys: &WriteKeys) -> Scan<()> {
    *raw = Raw::default();
    let mut scratch = String::new();
    c.object(|c, key| {
        let buf = c.buf;
        match key_bytes(buf, key, &mut scratch) {
            b"ph" => raw.ph = Some(c.scalar()?),
            b"cat" => raw.cat = Some(c.scalar()?),
            b"name" => raw.name = Some(c.scalar()?),
            b"pid" => raw.pid = Some(c.scalar()?),
            b"tid" => {
                let (v, at) = spanned(c)?;
                raw.tid = Some(v);
                raw.tid_at = Some(at);
            }
            b"ts" => {
                let (v, at) = spanned(c)?;
                raw.ts = Some(v);
                raw.ts_at = Some(at);
            }
            b"dur" => raw.dur = Some(c.scalar()?),
            b"args" => {
                raw.gni = None;
                raw.correlation = None;
                raw.args_name = None;
                raw.args_stream = None;
                raw.grid = None;
                raw.block = None;
                raw.stream_at = None;
                raw.node_at = None;
                raw.args_conflict = false;
                if c.peek()? == b'{' {
                    let start = c.pos;
                    raw.args_object = true;
                    let mut scratch = String::new();
                    let mut members = 0;
                    c.object(|c, key| {
                        let buf = c.buf;
                        members += 1;
                        let key = key_bytes(buf, key, &mut scratch);
                        if write_keys.contains(key) {
                            raw.args_conflict = true;
                        }
                        match key {
                            b"graph node id" => {
                                let (v, at) = spanned(c)?;
                                raw.gni = Some(v);
                                raw.node_at = Some(at);
                            }
                            b"correlation" => raw.correlation = Some(c.scalar()?),
                            b"name" => raw.args_name = Some(c.scalar()?),
                            b"stream" => {
                                let (v, at) = spanned(c)?;
                                raw.args_stream = Some(v);
                                raw.stream_at = Some(at);
                            }
                            b"grid" => raw.grid = Some(c.scalar()?),
                            b"block" => raw.block = Some(c.scalar()?),
                            _ => c.skip_value()?,
                        }
                        Ok(())
                    })?;
                    raw.args = Some(Scalar::Container { start, end: c.pos });
                    raw.args_close = Some(c.pos - 1);
                    raw.args_empty = members == 0;
                } else {
                    raw.args_object = false;
                    raw.args_close = None;
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

/// Index one parsed event.
fn observe(buf: &[u8], raw: &Raw, ordinal: u32, index: &mut TraceIndex) -> Kept {
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
    let tid = key(buf, raw.tid, &mut index.keys);
    if !is_tracked(cat, ph, node) {
        index.event_count += 1;
        let id = index.keys.id(tid);
        index.use_lane(id);
        return Kept::Lane;
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

fn places(raw: &Raw, start: usize, end: usize) -> Places {
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

/// Read the whole trace once. `progress(file_bytes_read, file_len)` is called per chunk;
/// `write_keys` are the keys annotations will write (see [`WriteKeys`]).
pub fn scan(path: &Path, write_keys: &WriteKeys, progress: &mut dyn FnMut(u64, u64)) -> Result<(TraceIndex, Layout), ScanFailure> {
    let mut window = Window::open(path)?;
    let mut index = TraceIndex::default();
    let mut layout = Layout::default();
    let mut pos: usize = 0; // where the next step starts in the window
    let mut eof = false;
    let mut state = State::Start;
    let mut saw_events = false;
    let mut raw = Raw::default();
    let mut prev_end: Option<u64> = None;
    let mut last_kept = Kept::Lane;

    loop {
        let base = window.base;
        let mut c = Cursor::new(window.bytes(), pos);
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
                        layout.set_next_start(last_kept, abs_start);
                        let kept = if c.buf[start] == b'{' {
                            parse_event(&mut c, &mut raw, write_keys)?;
                            observe(c.buf, &raw, layout.elements as u32, &mut index)
                        } else {
                            c.skip_value()?;
                            index.event_count += 1;
                            Kept::Lane
                        };
                        let abs_end = base + c.pos as u64;
                        let span = Span::new(abs_start, abs_end, prev_end.unwrap_or(abs_start));
                        match kept {
                            Kept::Event(_) => {
                                layout.event_spans.push(span);
                                layout.event_places.push(places(&raw, start, c.pos));
                            }
                            Kept::Flow(_) => {
                                layout.flow_spans.push(span);
                                layout.flow_places.push(places(&raw, start, c.pos));
                            }
                            Kept::Lane => {}
                        }
                        last_kept = kept;
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
                            layout.set_next_start(last_kept, layout.array_close);
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
                let at = window.end();
                let what = if at == 0 { "the file is empty".to_string() } else { "the trace is truncated (unexpected end of input)".to_string() };
                return Err(ScanFailure::Invalid(what, Some(at)));
            }
            Err(ScanError::Incomplete) => {
                window.consume(pos);
                pos = 0;
                if window.fill()? == 0 {
                    eof = true;
                }
                progress(window.file_position(), window.file_len());
            }
        }
    }
    if !saw_events {
        return Err(ScanFailure::Invalid("the trace has no traceEvents".into(), None));
    }
    layout.total_len = window.end();
    Ok((index, layout))
}
