//! Pass one: stream a trace once, check that it is JSON, and build the
//! [`TraceIndex`] plus the byte [`Layout`] that pass two rewrites by: whole, or in
//! parallel segments ([`crate::read::parallel`]).

use std::path::Path;

use crate::index::{Kept, TraceIndex};
use crate::json::{Cursor, Scan};
use crate::read::decode::{observe, places};
pub(crate) use crate::read::event_fields::WriteKeys;
use crate::read::event_fields::{self, Raw};
pub(crate) use crate::read::grammar::ScanFailure;
use crate::read::grammar::{Grammar, Visit};
use crate::read::input::Window;
pub(crate) use crate::read::layout::Layout;
use crate::read::layout::{ByteSpan, FlowPlaces};
use crate::read::parallel::{scan_parallel, SEGMENT_BYTES};
use crate::CancelToken;

/// About the fewest bytes a tracked event or flow takes as profilers write them (where
/// they take fewer, the reserved room runs out and the vectors grow).
const MIN_EVENT_BYTES: u64 = 64;

/// One scanner over a stretch of the input: the whole trace, or (for a parallel scan)
/// the events between two element boundaries.
pub(crate) struct Segment<'k> {
    write_keys: &'k WriteKeys,
    cancel: &'k CancelToken,
    pub(crate) index: TraceIndex,
    pub(crate) layout: Layout,
    raw: Raw,
    /// End of the last element scanned (where a segment that stops at the next one ends).
    pub(crate) prev_end: Option<u64>,
    /// Stop at the element that starts here (the next segment's first).
    stop_at: Option<u64>,
    /// The segment's end was not where an element starts: its split was no boundary.
    pub(crate) missed_stop: bool,
}

impl<'k> Segment<'k> {
    pub(crate) fn new(
        write_keys: &'k WriteKeys,
        cancel: &'k CancelToken,
        prev_end: Option<u64>,
        stop_at: Option<u64>,
    ) -> Self {
        Segment {
            write_keys,
            cancel,
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
    pub(crate) fn make_room(&mut self, bytes: u64) {
        let most = (bytes / MIN_EVENT_BYTES) as usize;
        // where the system will not promise the room, the vectors grow as they go
        let _ = (self.index.events.try_reserve(most), self.index.flows.try_reserve(most));
        let layout = &mut self.layout;
        let _ = (layout.event_spans.try_reserve(most), layout.event_places.try_reserve(most));
        let _ = (layout.flow_spans.try_reserve(most), layout.flow_places.try_reserve(most));
    }

    /// Scan from `start` (an offset of the file, where `grammar` is) to the segment's
    /// stop or the end, reading through `buffer` (a window's, given back for the next
    /// segment), with the invalid UTF-8 of the strings read.
    pub(crate) fn run(
        &mut self,
        mut grammar: Grammar,
        path: &Path,
        start: u64,
        buffer: &mut Vec<u8>,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<(), ScanFailure> {
        let mut window = Window::open_at_in(path, start, std::mem::take(buffer), self.cancel)?;
        let walked = grammar.walk(&mut window, self, progress);
        self.layout.invalid_utf8 = grammar.invalid_utf8;
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

/// Read the whole trace once, on up to `threads` threads. `progress(file_bytes_read,
/// file_len)` is called as it goes; `write_keys` are the keys annotations will write
/// (see [`WriteKeys`]). Plain files are scanned in parallel segments that split at event
/// boundaries (checked: a split that turns out not to be one falls back to a single
/// scan). Reading fails once `cancel` is cancelled.
pub(crate) fn scan(
    path: &Path,
    write_keys: &WriteKeys,
    threads: usize,
    cancel: &CancelToken,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<(TraceIndex, Layout), ScanFailure> {
    let threads = threads.min(8);
    let len = std::fs::metadata(path)?.len();
    if threads > 1 && len >= PARALLEL_FROM && !crate::read::input::is_gzip_file(path)? {
        if let Some(result) = scan_parallel(path, write_keys, threads, SEGMENT_BYTES, len, cancel, progress)?
        {
            return Ok(result);
        }
    }
    let mut whole = Segment::new(write_keys, cancel, None, None);
    whole.run(Grammar::at_start(), path, 0, &mut Vec::new(), progress)?;
    Ok((whole.index, whole.layout))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::keys::{Key, Num};
    use crate::index::Node;
    use crate::read::parallel::{boundary_in, guess_boundary, segment_cuts, MAX_SEGMENTS};

    fn scan_text(text: &str) -> Result<(TraceIndex, Layout), ScanFailure> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.json");
        std::fs::write(&path, text).unwrap();
        scan(&path, &WriteKeys::default(), 1, &CancelToken::new(), &mut |_, _| {})
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
        let run = CancelToken::new();
        let mut whole = Segment::new(&no_keys, &run, None, None);
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
        assert_eq!(a.1.invalid_utf8, b.1.invalid_utf8);
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
        let run = CancelToken::new();
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
            let many = scan_parallel(
                &path,
                &WriteKeys::default(),
                threads,
                segment_bytes,
                len,
                &run,
                &mut |_, _| {},
            )
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
        let run = CancelToken::new();
        // Every event holds strings that look like event boundaries.
        let decoy = r#"{"ph": "X", "cat": "cpu_op", "name": "}, {", "pid": 1, "tid": 2, "ts": 3, "args": {"s": "x}, {\"y\": 1}, {"}}"#;
        let kernel = r#"{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.5, "dur": 2, "args": {"graph node id": 8}}"#;
        let events: Vec<&str> = (0..30_000).map(|i| if i % 3 == 0 { kernel } else { decoy }).collect();
        let dir = tempfile::tempdir().unwrap();
        let (path, len) = trace_file(dir.path(), "t.json", &events);
        for threads in [2, 5] {
            if let Some(many) =
                scan_parallel(&path, &WriteKeys::default(), threads, len / 7, len, &run, &mut |_, _| {})
                    .unwrap()
            {
                same(&many, &single(&path));
            }
        }
        let whole = scan(&path, &WriteKeys::default(), 2, &run, &mut |_, _| {}).unwrap();
        same(&whole, &single(&path));
    }

    #[test]
    fn invalid_utf8_is_counted_once_however_the_trace_is_split() {
        let kernel = br#"{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.5, "dur": 2, "args": {"graph node id": 8}}"#;
        let odd = b"{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"\xff\xfe \xe2\x82\", \"pid\": 1, \"tid\": 2, \"ts\": 3}";
        let mut text = b"{\"traceEvents\": [".to_vec();
        for i in 0..30_000 {
            if i > 0 {
                text.extend_from_slice(b",\n ");
            }
            text.extend_from_slice(if i % 1000 == 7 { odd } else { kernel });
        }
        text.extend_from_slice(b"]}");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.json");
        std::fs::write(&path, &text).unwrap();
        let first = text.windows(2).position(|w| w == b"\xff\xfe").unwrap() as u64;
        let whole = single(&path);
        assert_eq!(whole.1.invalid_utf8.count, 30 * 3, "\\xff, \\xfe and the cut-short \\xe2\\x82 of each");
        assert_eq!(whole.1.invalid_utf8.first_at, Some(first));
        let run = CancelToken::new();
        for threads in [2, 3] {
            let len = text.len() as u64;
            let many =
                scan_parallel(&path, &WriteKeys::default(), threads, len / 9, len, &run, &mut |_, _| {})
                    .unwrap()
                    .expect("every split is a boundary");
            same(&many, &whole);
        }
    }

    #[test]
    fn a_string_read_again_with_more_input_is_counted_once() {
        // a 3 MB name spans the window's refills: its element is read again, whole
        let mut name = vec![b'n'; 3 << 20];
        for at in [5, (1 << 20) - 1, 2 << 20, (3 << 20) - 2] {
            name[at] = 0xff;
        }
        name[100..105].copy_from_slice("\u{e9}\u{4e2d}".as_bytes());
        let head = b"{\"traceEvents\": [{\"ph\": \"X\", \"cat\": \"cpu_op\", \"na\xffme\": \"";
        let tail = b"\", \"ts\": 1, \"args\": {\"k\": \"caf\\u00e9 \xe2\x82\"}}, 5]}";
        let text = [&head[..], &name, &tail[..]].concat();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.json");
        std::fs::write(&path, &text).unwrap();
        let (_, layout) = single(&path);
        let key_at = text.windows(3).position(|w| w == b"a\xffm").unwrap() as u64 + 1;
        // the key's byte, the name's four and the cut-short sequence in args; not é or 中
        assert_eq!(layout.invalid_utf8.count, 6);
        assert_eq!(layout.invalid_utf8.first_at, Some(key_at));
    }

    /// How fast the scanner validates a trace, against how fast it indexes it (not a
    /// check: a measurement, run by hand):
    /// `CGFAST_SCAN_FLOOR=TRACE cargo test --release -p cgfast-core --lib scan_floor -- --ignored --nocapture`.
    #[test]
    #[ignore = "a measurement: needs CGFAST_SCAN_FLOOR=<trace>"]
    fn scan_floor() {
        let path = std::env::var_os("CGFAST_SCAN_FLOOR").expect("CGFAST_SCAN_FLOOR names a trace");
        let path = Path::new(&path);
        let data = std::fs::read(path).expect("readable");
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        for _ in 0..3 {
            let t = std::time::Instant::now();
            Cursor::new(&data, 0).skip_value().expect("valid JSON");
            println!("skip_value {:.3}s", t.elapsed().as_secs_f64());
            let t = std::time::Instant::now();
            let (index, _) = scan(path, &WriteKeys::default(), threads, &CancelToken::new(), &mut |_, _| {})
                .expect("a trace");
            println!("scan {:.3}s  tracked events {}", t.elapsed().as_secs_f64(), index.events.len());
        }
    }
}
