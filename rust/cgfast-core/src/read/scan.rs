//! Pass one: stream a trace once, check that it is JSON, and build the
//! [`TraceIndex`] plus the byte layout that pass two rewrites by.

use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::index::keys::{Key, Keys, Num, Spelling};
use crate::index::{is_tracked, Cat, Field, Kept, Node, Observed, Ph, TraceIndex};
use crate::json::{str_is, text_of, Cursor, Scalar, Scan};
pub use crate::read::event_fields::WriteKeys;
use crate::read::event_fields::{self, Raw};
pub use crate::read::grammar::ScanFailure;
use crate::read::grammar::{Grammar, Visit};
use crate::read::input::Window;

/// Where a tracked event sits in the (decompressed) input, for pass two. The separators
/// around it are found again when it is removed (rarely): they are not kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteSpan {
    pub start: u64,
    len: u32,
}

impl ByteSpan {
    pub fn new(start: u64, end: u64) -> ByteSpan {
        ByteSpan { start, len: (end - start) as u32 }
    }

    pub fn end(&self) -> u64 {
        self.start + self.len as u64
    }
}

/// The byte layout of `traceEvents` in the input.
#[derive(Clone, Debug, Default)]
pub struct Layout {
    /// One span per tracked event, in the order of `TraceIndex::events`.
    pub event_spans: Vec<ByteSpan>,
    /// One span per flow, in the order of `TraceIndex::flows`.
    pub flow_spans: Vec<ByteSpan>,
    /// Where to splice the edits of each tracked event, and of each flow.
    pub event_places: Vec<Places>,
    pub flow_places: Vec<FlowPlaces>,
    /// Offset of the `]` that closes `traceEvents`.
    pub array_close: u64,
    pub elements: u64,
    pub total_len: u64,
}

impl Layout {
    /// Add the layout of the segment after this one, leaving its vectors empty.
    fn append(&mut self, next: &mut Layout) {
        self.event_spans.append(&mut next.event_spans);
        self.flow_spans.append(&mut next.flow_spans);
        self.event_places.append(&mut next.event_places);
        self.flow_places.append(&mut next.flow_places);
        self.elements += next.elements;
        self.array_close = next.array_close;
        self.total_len = next.total_len;
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
                (start < u16::MAX as usize && len <= u16::MAX as usize)
                    .then_some(Rel { start: start as u16, len: len as u16 })
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

/// Where a flow's `tid` and `ts` are: all that pass two ever changes in a flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowPlaces {
    tid: Rel,
    ts: Rel,
    exact: bool,
}

impl FlowPlaces {
    pub fn places(self) -> Places {
        Places { tid: self.tid, ts: self.ts, exact: self.exact, ..Places::INEXACT }
    }

    fn of(p: Places) -> FlowPlaces {
        FlowPlaces { tid: p.tid, ts: p.ts, exact: p.exact }
    }
}

impl Places {
    const INEXACT: Places = Places {
        tid: Rel::NONE,
        ts: Rel::NONE,
        stream: Rel::NONE,
        node: Rel::NONE,
        args_close: u16::MAX,
        args_empty: false,
        exact: false,
    };
}

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
            buf[span.start..span.end].starts_with(crate::index::STAMP_PREFIX.as_bytes())
        }
        Some(Scalar::Str(span)) => text_of(buf, span).starts_with(crate::index::STAMP_PREFIX),
        _ => false,
    }
}

/// Index one parsed event.
fn observe(buf: &[u8], raw: &Raw, ordinal: u32, index: &mut TraceIndex) -> Kept {
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
            Some(Scalar::Str(span)) => crate::index::ReplayMarker::from_text(&text_of(buf, span)),
            _ => crate::index::ReplayMarker::None,
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

/// One scanner over a stretch of the input: the whole trace, or (for a parallel scan)
/// the events between two element boundaries.
struct Segment<'k> {
    write_keys: &'k WriteKeys,
    index: TraceIndex,
    layout: Layout,
    raw: Raw,
    /// End of the last element scanned (where a segment that stops at the next one ends).
    prev_end: Option<u64>,
    /// Stop at the element that starts here (the next segment's first).
    stop_at: Option<u64>,
    /// The segment's end was not where an element starts: its split was no boundary.
    missed_stop: bool,
}

impl<'k> Segment<'k> {
    fn new(write_keys: &'k WriteKeys, prev_end: Option<u64>, stop_at: Option<u64>) -> Self {
        Segment {
            write_keys,
            index: TraceIndex::default(),
            layout: Layout::default(),
            raw: Raw::default(),
            prev_end,
            stop_at,
            missed_stop: false,
        }
    }

    /// Room for the events of `bytes` of input, at most one per `MIN_EVENT_BYTES`, made
    /// at once: the room is mapped memory, which costs nothing until it is used, and
    /// the vectors need not grow through the heap, where their old copies would stay.
    fn make_room(&mut self, bytes: u64) {
        let most = (bytes / MIN_EVENT_BYTES) as usize;
        // where the system will not promise the room, the vectors grow as they go
        let _ = (self.index.events.try_reserve(most), self.index.flows.try_reserve(most));
        let layout = &mut self.layout;
        let _ = (layout.event_spans.try_reserve(most), layout.event_places.try_reserve(most));
        let _ = (layout.flow_spans.try_reserve(most), layout.flow_places.try_reserve(most));
    }

    /// Scan from `start` (an offset of the file, where `grammar` is) to the segment's
    /// stop or the end, reading through `buffer` (a window's, given back for the next
    /// segment).
    fn run(
        &mut self,
        mut grammar: Grammar,
        path: &Path,
        start: u64,
        buffer: &mut Vec<u8>,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<(), ScanFailure> {
        let mut window = Window::open_at_in(path, start, std::mem::take(buffer))?;
        let walked = grammar.walk(&mut window, self, progress);
        *buffer = window.into_buffer();
        self.layout.total_len = walked?;
        Ok(())
    }
}

impl Visit for Segment<'_> {
    #[inline(always)]
    fn element(&mut self, c: &mut Cursor<'_>, base: u64) -> Scan<bool> {
        let start = c.pos;
        let abs_start = base + start as u64;
        if let Some(stop) = self.stop_at {
            if abs_start >= stop {
                self.missed_stop = abs_start != stop;
                return Ok(false);
            }
        }
        let ordinal = self.layout.elements as u32;
        let kept = if c.buf[start] == b'{' {
            match event_fields::read_fast(c.buf, start, &mut self.raw, self.write_keys) {
                Some(end) => c.pos = end,
                None => event_fields::read(c, &mut self.raw, self.write_keys)?,
            }
            observe(c.buf, &self.raw, ordinal, &mut self.index)
        } else {
            c.skip_value()?;
            self.index.event_count += 1;
            Kept::Lane
        };
        let abs_end = base + c.pos as u64;
        let span = ByteSpan::new(abs_start, abs_end);
        match kept {
            Kept::Event(_) => {
                self.layout.event_spans.push(span);
                self.layout.event_places.push(places(&self.raw, start, c.pos));
            }
            Kept::Flow(_) => {
                self.layout.flow_spans.push(span);
                self.layout.flow_places.push(FlowPlaces::of(places(&self.raw, start, c.pos)));
            }
            Kept::Lane => {}
        }
        self.prev_end = Some(abs_end);
        self.layout.elements += 1;
        Ok(true)
    }

    /// A segment that stops at the next one's first element must not reach the end.
    fn close(&mut self, at: u64) -> bool {
        if self.stop_at.is_some() {
            self.missed_stop = true;
            return false;
        }
        self.layout.array_close = at;
        true
    }
}

/// Below this size a trace is scanned by one thread.
const PARALLEL_FROM: u64 = 32 << 20;

/// Read the whole trace once. `progress(file_bytes_read, file_len)` is called as it goes;
/// `write_keys` are the keys annotations will write (see [`WriteKeys`]). Plain files
/// are scanned in parallel segments that split at event boundaries (checked: a split
/// that turns out not to be one falls back to a single scan).
pub fn scan(
    path: &Path,
    write_keys: &WriteKeys,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<(TraceIndex, Layout), ScanFailure> {
    let threads = crate::threads().min(8);
    let len = std::fs::metadata(path)?.len();
    if threads > 1 && len >= PARALLEL_FROM && !crate::read::input::is_gzip_file(path)? {
        if let Some(result) = scan_parallel(path, write_keys, threads, SEGMENT_BYTES, len, progress)? {
            return Ok(result);
        }
    }
    let mut whole = Segment::new(write_keys, None, None);
    whole.run(Grammar::at_start(), path, 0, &mut Vec::new(), progress)?;
    Ok((whole.index, whole.layout))
}

/// Where an element probably starts after `from`: the `{` of `}` `,` `{` (white space
/// allowed), with the end of the element before it. Only a guess: a string can hold it.
fn guess_boundary(path: &Path, from: u64) -> std::io::Result<Option<(u64, u64)>> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = std::fs::File::open(path)?;
    // most events are short: look at a little first
    for size in [64 << 10, 1 << 20] {
        file.seek(SeekFrom::Start(from))?;
        let mut buf = vec![0u8; size];
        let n = file.read(&mut buf)?;
        if let Some((start, end)) = boundary_in(&buf[..n]) {
            return Ok(Some((from + start as u64, from + end as u64)));
        }
        if n < size {
            break;
        }
    }
    Ok(None)
}

/// The first `}` `,` `{` in `buf`: where the `{` is and where the element before ends.
fn boundary_in(buf: &[u8]) -> Option<(usize, usize)> {
    let mut i = 0;
    while let Some(k) = memchr::memchr(b'}', &buf[i..]) {
        let close = i + k;
        let mut j = close + 1;
        while j < buf.len() && matches!(buf[j], b' ' | b'\n' | b'\r' | b'\t') {
            j += 1;
        }
        if buf.get(j) == Some(&b',') {
            j += 1;
            while j < buf.len() && matches!(buf[j], b' ' | b'\n' | b'\r' | b'\t') {
                j += 1;
            }
            if buf.get(j) == Some(&b'{') {
                return Some((j, close + 1));
            }
        }
        i = close + 1;
    }
    None
}

type Scanned = (TraceIndex, Layout);

/// Plain traces are cut into segments, none shorter than this, scanned by whichever
/// thread is free, so that a slow stretch (or a busy core) does not hold the others up.
const SEGMENT_BYTES: u64 = 4 << 20;
/// About the fewest bytes a tracked event or flow takes as profilers write them (where
/// they take fewer, the reserved room runs out and the vectors grow).
const MIN_EVENT_BYTES: u64 = 64;
const MAX_SEGMENTS: usize = 128;

/// Where segments are cut: each takes about a `2 × threads`-th of what is left, but
/// none more than a half of `MAX_SEGMENTS`-th of the trace nor less than `min_bytes`.
/// Short segments keep the joined index growing in order while the threads scan (see
/// [`Joined`]); shorter ones at the end let the threads end together.
fn segment_cuts(len: u64, threads: usize, min_bytes: u64) -> Vec<u64> {
    let mut cuts = Vec::new();
    let mut from = 0;
    let most = min_bytes.max(len / (MAX_SEGMENTS as u64 / 2));
    while cuts.len() + 1 < MAX_SEGMENTS {
        from += ((len - from) / (2 * threads as u64)).clamp(min_bytes, most);
        if from + min_bytes / 2 >= len {
            break;
        }
        cuts.push(from);
    }
    cuts
}

/// Scan a plain trace in segments cut at guessed element boundaries, on `threads`
/// threads; `None` when it has no boundary to cut at, or a cut turns out not to be one.
fn scan_parallel(
    path: &Path,
    write_keys: &WriteKeys,
    threads: usize,
    segment_bytes: u64,
    len: u64,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Option<Scanned>, ScanFailure> {
    let cuts = element_cuts(path, len, threads, segment_bytes)?;
    if cuts.is_empty() {
        return Ok(None);
    }
    let segments = Segments::new(path, len, write_keys, cuts);
    let threads = threads.min(segments.count());
    let (finished_tx, finished_rx) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            let finished = finished_tx.clone();
            let segments = &segments;
            scope.spawn(move || {
                segments.scan_while_any_left();
                let _ = finished.send(());
            });
        }
        drop(finished_tx);
        segments.report_progress(&finished_rx, threads, len, progress);
    });
    Ok(segments.into_scanned())
}

/// Where the segments start (each at an element, with the end of the element before
/// it): one at or after each of [`segment_cuts`] that has a guessed boundary.
fn element_cuts(
    path: &Path,
    len: u64,
    threads: usize,
    segment_bytes: u64,
) -> std::io::Result<Vec<(u64, u64)>> {
    let mut cuts: Vec<(u64, u64)> = Vec::new();
    // a trace under `2 × threads` segments long still gets that many
    let min_bytes = segment_bytes.min(len / (2 * threads as u64)).max(1);
    for at in segment_cuts(len, threads, min_bytes) {
        if let Some(cut) = guess_boundary(path, at)? {
            if cuts.last().is_none_or(|last| cut.0 > last.0) {
                cuts.push(cut);
            }
        }
    }
    Ok(cuts)
}

/// The segments of a parallel scan, taken in turn by whichever thread is free.
struct Segments<'k> {
    path: &'k Path,
    len: u64,
    write_keys: &'k WriteKeys,
    /// Where segment `k + 1` starts, and where the element before it ends.
    cuts: Vec<(u64, u64)>,
    /// Bytes scanned by each segment, for progress.
    done: Vec<AtomicU64>,
    /// The next segment to scan.
    next: AtomicUsize,
    joined: std::sync::Mutex<Joined<'k>>,
    /// The emptied vectors of joined segments, for segments still to scan: their
    /// memory is already mapped.
    spares: std::sync::Mutex<Vec<Spare>>,
}

impl<'k> Segments<'k> {
    fn new(path: &'k Path, len: u64, write_keys: &'k WriteKeys, cuts: Vec<(u64, u64)>) -> Self {
        Segments {
            path,
            len,
            write_keys,
            done: (0..cuts.len() + 1).map(|_| AtomicU64::new(0)).collect(),
            cuts,
            next: AtomicUsize::new(0),
            joined: std::sync::Mutex::new(Joined {
                scanned: None,
                next: 0,
                waiting: Vec::new(),
                failed: false,
            }),
            spares: std::sync::Mutex::new(Vec::new()),
        }
    }

    fn count(&self) -> usize {
        self.cuts.len() + 1
    }

    /// Scan segments until none is left (or one failed), each through the same buffer.
    fn scan_while_any_left(&self) {
        let mut buffer = Vec::new();
        loop {
            let k = self.next.fetch_add(1, Ordering::Relaxed);
            if k >= self.count() {
                break;
            }
            let scanned = self.scan_one(k, &mut buffer);
            match scanned {
                Some(segment) => {
                    let emptied = lock(&self.joined).add(k, segment);
                    let mut spares = lock(&self.spares);
                    if self.next.load(Ordering::Relaxed) < self.count() {
                        spares.extend(emptied);
                    } else {
                        spares.clear();
                    }
                }
                None => {
                    lock(&self.joined).failed = true;
                    self.next.store(self.count(), Ordering::Relaxed);
                }
            }
        }
    }

    /// Segment `k`, scanned; `None` when it failed or its end is no element boundary
    /// (a split inside a string, say): the single scan decides.
    fn scan_one(&self, k: usize, buffer: &mut Vec<u8>) -> Option<Segment<'k>> {
        let (start, grammar, prev_end) = match k {
            0 => (0, Grammar::at_start(), None),
            _ => (self.cuts[k - 1].0, Grammar::at_event(), Some(self.cuts[k - 1].1)),
        };
        let stop = self.cuts.get(k).map(|c| c.0);
        let spare = lock(&self.spares).pop();
        let scanned = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut segment = Segment::new(self.write_keys, prev_end, stop);
            if let Some(spare) = spare {
                spare.lend(&mut segment);
            }
            // the first segment's vectors take every other segment's entries;
            // the others' grow as they need, their room kept for the next
            if k == 0 {
                segment.make_room(self.len);
            }
            segment
                .run(grammar, self.path, start, buffer, &mut |d, _| {
                    self.done[k].store(d - start, Ordering::Relaxed)
                })
                .map(|_| segment)
        }));
        let segment = scanned.ok()?.ok()?;
        let whole = !segment.missed_stop
            && (k == 0 || segment.layout.elements > 0)
            && (k + 1 == self.count() || segment.prev_end == Some(self.cuts[k].1));
        whole.then_some(segment)
    }

    /// Report the bytes scanned every 50 ms until the `threads` threads have finished.
    fn report_progress(
        &self,
        finished: &std::sync::mpsc::Receiver<()>,
        threads: usize,
        len: u64,
        progress: &mut dyn FnMut(u64, u64),
    ) {
        let mut running = threads;
        while running > 0 {
            match finished.recv_timeout(std::time::Duration::from_millis(50)) {
                Ok(()) => running -= 1,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    progress(self.done.iter().map(|d| d.load(Ordering::Relaxed)).sum(), len)
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
    }

    /// The whole trace's index and layout, if every segment was scanned and joined.
    fn into_scanned(self) -> Option<Scanned> {
        let count = self.count();
        let joined = self.joined.into_inner().unwrap_or_else(|e| e.into_inner());
        match joined.scanned {
            Some(scanned) if !joined.failed && joined.next == count => Some(scanned),
            _ => None,
        }
    }
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The segments scanned so far, joined in order as each one's turn comes.
struct Joined<'k> {
    scanned: Option<Scanned>,
    /// The segment whose turn it is, and those that finished before theirs.
    next: usize,
    waiting: Vec<(usize, Segment<'k>)>,
    failed: bool,
}

impl<'k> Joined<'k> {
    /// Segment `k`, scanned: joined, with any that waited for it. Returns the vectors
    /// of those joined, emptied.
    fn add(&mut self, k: usize, segment: Segment<'k>) -> Vec<Spare> {
        let mut emptied = Vec::new();
        self.waiting.push((k, segment));
        while let Some(at) = self.waiting.iter().position(|(k, _)| *k == self.next) {
            let (_, mut segment) = self.waiting.swap_remove(at);
            match &mut self.scanned {
                None => self.scanned = Some((segment.index, segment.layout)),
                Some((index, layout)) => {
                    index.append(&mut segment.index, layout.elements as u32);
                    layout.append(&mut segment.layout);
                    emptied.push(Spare::of(segment));
                }
            }
            self.next += 1;
        }
        emptied
    }
}

/// Empty vectors of a joined segment.
struct Spare {
    events: Vec<crate::index::Tracked>,
    flows: Vec<crate::index::Flow>,
    layout: Layout,
}

impl Spare {
    /// The vectors of a joined segment (emptied by joining it), without its counts.
    fn of(segment: Segment<'_>) -> Spare {
        let Layout { event_spans, flow_spans, event_places, flow_places, .. } = segment.layout;
        let layout = Layout { event_spans, flow_spans, event_places, flow_places, ..Layout::default() };
        Spare { events: segment.index.events, flows: segment.index.flows, layout }
    }

    fn lend(self, segment: &mut Segment<'_>) {
        (segment.index.events, segment.index.flows, segment.layout) = (self.events, self.flows, self.layout);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan_text(text: &str) -> Result<(TraceIndex, Layout), ScanFailure> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.json");
        std::fs::write(&path, text).unwrap();
        scan(&path, &WriteKeys::default(), &mut |_, _| {})
    }

    fn error(text: &str) -> (String, Option<u64>) {
        match scan_text(text) {
            Err(ScanFailure::Invalid(m, at)) => (m, at),
            Err(ScanFailure::Io(e)) => (e.to_string(), None),
            Ok(_) => panic!("{text:?} scanned"),
        }
    }

    const TRACE: &str = r#"{"schemaVersion": 1, "traceEvents": [
  {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.5, "dur": 2, "args": {"stream": 7, "correlation": 3, "grid": [1, 2, 3], "block": [4, 5, 6], "graph node id": 4294967296}},
  {"ph": "f", "id": 3, "pid": 0, "tid": 7, "ts": 1.5, "cat": "ac2g", "name": "ac2g", "bp": "e"},
  {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 99, "ts": 1, "args": {"a": [1, {"b": "c\"}"}]}},
  5,
  {"name": "thread_name", "ph": "M", "pid": 0, "tid": 7, "args": {"name": "stream 7 "}}
], "traceName": "x"}
"#;

    #[test]
    fn indexes_what_the_passes_need() {
        let (index, layout) = scan_text(TRACE).unwrap();
        assert_eq!(index.event_count, 5);
        assert_eq!(layout.elements, 5);
        assert_eq!(index.events.len(), 2, "the kernel and the metadata");
        assert_eq!(index.flows.len(), 1);
        let k = &index.events[0];
        assert_eq!(k.node(), Node::Id(1 << 32));
        assert_eq!(k.correlation(), Some(3));
        assert_eq!(index.shape_of(k), Some([1, 2, 3, 4, 5, 6]));
        assert_eq!(k.ts(), Some(Num::Float(1.5)));
        assert_eq!(k.dur(), Num::Int(2));
        assert!(index.events[1].stream_thread_name());
        assert!(index.lane_used_by_untracked(index.keys.find(Key::Int(99)).unwrap()));
        let span = layout.event_spans[0];
        assert_eq!(&TRACE[span.start as usize..span.end() as usize][..12], r#"{"ph": "X", "#);
        assert_eq!(layout.array_close as usize, TRACE.rfind(']').unwrap());
        let places = layout.event_places[0];
        assert!(places.exact);
        let tid = &TRACE[span.start as usize + places.tid.start as usize..][..places.tid.len as usize];
        assert_eq!(tid, "7");
    }

    #[test]
    fn reports_bad_input_with_its_offset() {
        assert_eq!(error(""), ("the file is empty".into(), Some(0)));
        assert!(error("[1, 2]").0.contains("a trace starts with '{'"));
        assert_eq!(error(r#"{"traceEvents": 5}"#).0, "not a valid trace: expected a list for traceEvents");
        assert_eq!(error(r#"{"x": 1}"#).0, "the trace has no traceEvents");
        let (msg, at) = error(&TRACE[..200]);
        assert!(msg.contains("truncated") && at == Some(200), "{msg} {at:?}");
        let (msg, at) = error(r#"{"traceEvents": [{"ph": "X",, }]}"#);
        assert!(msg.starts_with("not a valid trace") && at == Some(28), "{msg} {at:?}");
        assert!(error(&format!("{TRACE} x")).0.contains("end of the file"));
        assert!(error(r#"{"traceEvents": [], "traceEvents": []}"#).0.contains("single traceEvents"));
    }

    fn single(path: &Path) -> (TraceIndex, Layout) {
        let no_keys = WriteKeys::default();
        let mut whole = Segment::new(&no_keys, None, None);
        whole.run(Grammar::at_start(), path, 0, &mut Vec::new(), &mut |_, _| {}).unwrap();
        (whole.index, whole.layout)
    }

    fn same(a: &(TraceIndex, Layout), b: &(TraceIndex, Layout)) {
        assert_eq!(a.0.event_count, b.0.event_count);
        assert_eq!(a.0.events.len(), b.0.events.len());
        assert_eq!(a.0.flows.len(), b.0.flows.len());
        assert_eq!(a.1.event_spans, b.1.event_spans);
        assert_eq!(a.1.event_places, b.1.event_places);
        assert_eq!(a.1.elements, b.1.elements);
        assert_eq!(a.1.array_close, b.1.array_close);
        assert!(a.0.events.iter().zip(&b.0.events).all(|(x, y)| x.ordinal == y.ordinal
            && x.ts() == y.ts()
            && a.0.keys.key(x.tid) == b.0.keys.key(y.tid)));
        let stamps = |i: &TraceIndex| {
            i.stamps
                .iter()
                .map(|s| (i.keys.key(s.pid), i.keys.key(s.tid), s.start, s.end, s.graph))
                .collect::<Vec<_>>()
        };
        let launches = |i: &TraceIndex| {
            i.launches
                .iter()
                .map(|l| (i.keys.key(l.pid), i.keys.key(l.tid), l.ts, l.correlation))
                .collect::<Vec<_>>()
        };
        assert_eq!(stamps(&a.0), stamps(&b.0));
        assert_eq!(launches(&a.0), launches(&b.0));
        assert_eq!(a.0.malformed_stamps, b.0.malformed_stamps);
    }

    fn trace_file(dir: &Path, name: &str, events: &[&str]) -> (std::path::PathBuf, u64) {
        let text = format!("{{\"traceEvents\": [{}], \"after\": [1]}}", events.join(",\n "));
        let path = dir.join(name);
        std::fs::write(&path, &text).unwrap();
        (path, text.len() as u64)
    }

    #[test]
    fn parallel_segments_equal_one_scan() {
        let kernel = r#"{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.5, "dur": 2, "args": {"graph node id": 8}}"#;
        let flow = r#"{"ph": "f", "cat": "ac2g", "pid": 0, "tid": 9, "ts": 1.5}"#;
        let op = r#"{"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 2, "ts": 3}"#;
        let stamp = r#"{"ph": "X", "cat": "user_annotation", "name": "cgfast.replay 3", "pid": 1, "tid": 2, "ts": 3, "dur": 5}"#;
        let launch = r#"{"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 1, "tid": 2, "ts": 4, "dur": 1, "args": {"correlation": 12}}"#;
        let malformed = r#"{"ph": "X", "cat": "user_annotation", "name": "cgfast.replay x", "pid": 1, "tid": 2, "ts": 3, "dur": 5}"#;
        let events: Vec<&str> =
            (0..30_000).map(|i| [kernel, flow, op, stamp, launch, malformed][i % 6]).collect();
        let dir = tempfile::tempdir().unwrap();
        let (path, len) = trace_file(dir.path(), "t.json", &events);
        assert_eq!(
            (single(&path).0.stamps.len(), single(&path).0.launches.len(), single(&path).0.malformed_stamps),
            (5000, 5000, 5000)
        );
        for (threads, segment_bytes) in
            [(2, SEGMENT_BYTES), (3, SEGMENT_BYTES), (7, SEGMENT_BYTES), (2, len / 9), (3, 64 << 10)]
        {
            let many =
                scan_parallel(&path, &WriteKeys::default(), threads, segment_bytes, len, &mut |_, _| {})
                    .unwrap()
                    .expect("every split is a boundary");
            same(&many, &single(&path));
        }
    }

    #[test]
    fn segments_are_short_and_shorten_towards_the_end() {
        let mb = 1 << 20;
        let cuts = segment_cuts(1000 * mb, 2, SEGMENT_BYTES);
        let sizes: Vec<u64> = cuts.windows(2).map(|w| w[1] - w[0]).collect();
        assert_eq!(cuts[0], 1000 * mb / (MAX_SEGMENTS as u64 / 2), "none longer than a 64th of the trace");
        assert!(sizes.windows(2).all(|w| w[1] <= w[0]), "{sizes:?}");
        assert!(sizes.iter().any(|&s| s < cuts[0]), "{sizes:?}");
        assert!(sizes.iter().all(|&s| s >= SEGMENT_BYTES));
        assert!(1000 * mb - cuts.last().unwrap() < SEGMENT_BYTES * 3 / 2, "the last segment is short");
        let cuts = segment_cuts(200 * mb, 2, SEGMENT_BYTES);
        assert!(
            cuts[0] == SEGMENT_BYTES && cuts.windows(2).all(|w| w[1] - w[0] == SEGMENT_BYTES),
            "{cuts:?}"
        );
        assert!(segment_cuts(mb, 2, mb).is_empty(), "one segment when it would be as short as the rest");
        assert_eq!(segment_cuts(1 << 40, 2, 1).len() + 1, MAX_SEGMENTS);
    }

    #[test]
    fn boundaries_are_found_past_long_events() {
        assert_eq!(boundary_in(b"1}, {\"a\""), Some((4, 2)));
        assert_eq!(boundary_in(b"x} ,\n\t{"), Some((6, 2)));
        assert_eq!(boundary_in(b"}}, 1, {"), None);
        assert_eq!(boundary_in(b"}, "), None);
        let long = format!(r#"{{"ph": "X", "name": "{}"}}"#, "n".repeat(300 << 10));
        let short = r#"{"ph": "X", "name": "m"}"#;
        let dir = tempfile::tempdir().unwrap();
        let (path, _) = trace_file(dir.path(), "t.json", &[&long, short, short]);
        let text = std::fs::read_to_string(&path).unwrap();
        let second = text.find(short).unwrap() as u64;
        assert_eq!(
            guess_boundary(&path, 40).unwrap(),
            Some((second, second - 3)),
            "a boundary beyond the first look"
        );
        assert_eq!(
            guess_boundary(&path, second + 1).unwrap().map(|b| b.0),
            Some(second + short.len() as u64 + 3)
        );
        assert_eq!(guess_boundary(&path, text.len() as u64 - 10).unwrap(), None);
    }

    #[test]
    fn splits_inside_strings_fall_back_to_one_scan() {
        // Every event holds strings that look like event boundaries.
        let decoy = r#"{"ph": "X", "cat": "cpu_op", "name": "}, {", "pid": 1, "tid": 2, "ts": 3, "args": {"s": "x}, {\"y\": 1}, {"}}"#;
        let kernel = r#"{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.5, "dur": 2, "args": {"graph node id": 8}}"#;
        let events: Vec<&str> = (0..30_000).map(|i| if i % 3 == 0 { kernel } else { decoy }).collect();
        let dir = tempfile::tempdir().unwrap();
        let (path, len) = trace_file(dir.path(), "t.json", &events);
        for threads in [2, 5] {
            if let Some(many) =
                scan_parallel(&path, &WriteKeys::default(), threads, len / 7, len, &mut |_, _| {}).unwrap()
            {
                same(&many, &single(&path));
            }
        }
        let whole = scan(&path, &WriteKeys::default(), &mut |_, _| {}).unwrap();
        same(&whole, &single(&path));
    }
}
