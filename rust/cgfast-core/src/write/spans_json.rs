//! Scope spans as trace events.

use std::io::{self, Write};
use std::sync::{Condvar, Mutex};

use crate::index::keys::Spelling;
use crate::index::{TraceIndex, NONE};
use crate::json::quote;
use crate::passes::spans::{Span, Spans};
use crate::write::rewrite::Appended;

/// The spans of a trace as `traceEvents` elements, lane by lane, separated by `,`.
pub(crate) struct SpansJson {
    spans: Spans,
    /// Each name's span up to its name, quoted: `{"ph":"X",...,"name":"N"`.
    heads: Vec<String>,
    /// Each lane's `,"pid":P,"tid":T,"ts":`.
    places: Vec<String>,
    /// `,"args":{"cgfast":"scope","key":K}}`.
    tail: String,
    /// Threads that format spans besides the one writing them.
    workers: usize,
}

impl SpansJson {
    /// `key` names the annotation key the spans show; `workers` threads format them
    /// besides the one writing them.
    pub(crate) fn new(spans: Spans, index: &TraceIndex, key: &str, workers: usize) -> SpansJson {
        let keys = &index.keys;
        let spelled = |id, spelling: Spelling| keys.to_json_spelled(keys.key(id), spelling);
        let places = spans
            .lanes
            .iter()
            .map(|&(pid, lane, pid_spelling, lane_spelling)| {
                let pid = if pid == NONE { "0".to_string() } else { spelled(pid, pid_spelling) };
                format!(",\"pid\":{pid},\"tid\":{},\"ts\":", spelled(lane, lane_spelling))
            })
            .collect();
        SpansJson {
            heads: spans
                .names
                .iter()
                .map(|n| format!("{{\"ph\":\"X\",\"cat\":\"gpu_user_annotation\",\"name\":{}", quote(n)))
                .collect(),
            places,
            tail: format!(",\"args\":{{\"cgfast\":\"scope\",\"key\":{}}}}}", quote(key)),
            spans,
            workers,
        }
    }

    fn write_span(&self, span: &Span, place: &str, out: &mut Vec<u8>) {
        let head = &self.heads[span.name as usize];
        // room for all of it at once: two times of at most 41 characters each (a sign,
        // 36 digits and three decimals)
        out.reserve(head.len() + place.len() + 2 * 41 + DUR.len() + self.tail.len());
        out.extend_from_slice(head.as_bytes());
        out.extend_from_slice(place.as_bytes());
        push_micros(out, self.spans.base + span.start as i128, span.integer);
        out.extend_from_slice(DUR);
        push_micros(out, span.end as i128 - span.start as i128, span.integer);
        out.extend_from_slice(self.tail.as_bytes());
    }

    /// Runs of at most [`CHUNK`] spans of one lane, in writing order.
    fn chunks(&self) -> Vec<(usize, std::ops::Range<usize>)> {
        let mut chunks = Vec::new();
        for (lane, spans) in self.spans.spans.iter().enumerate() {
            for start in (0..spans.len()).step_by(CHUNK) {
                chunks.push((lane, start..spans.len().min(start + CHUNK)));
            }
        }
        chunks
    }

    /// The spans of a chunk, separated by `,`.
    fn write_chunk(&self, (lane, range): &(usize, std::ops::Range<usize>), out: &mut Vec<u8>) {
        let place = &self.places[*lane];
        for (i, span) in self.spans.spans[*lane][range.clone()].iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            self.write_span(span, place, out);
        }
    }

    /// Write the spans, formatted on `workers` threads besides this one (which writes
    /// them in order) or, with none, on this one.
    fn write_with(&self, out: &mut dyn Write, workers: usize) -> io::Result<()> {
        let chunks = self.chunks();
        let format = |i: usize, buffer: &mut Vec<u8>| {
            if i > 0 {
                buffer.push(b',');
            }
            self.write_chunk(&chunks[i], buffer);
        };
        let workers = workers.min(chunks.len().saturating_sub(1));
        if workers == 0 {
            let mut buffer = Vec::with_capacity(CHUNK_CAPACITY);
            for i in 0..chunks.len() {
                buffer.clear();
                format(i, &mut buffer);
                out.write_all(&buffer)?;
            }
            return Ok(());
        }
        let formatted = Formatted::new(chunks.len());
        std::thread::scope(|scope| {
            for _ in 0..workers {
                scope.spawn(|| {
                    // one that panics stops the writing, which would wait for it forever
                    let _stop = StopOnPanic(&formatted);
                    while let Some((i, mut buffer)) = formatted.next_to_format() {
                        format(i, &mut buffer);
                        formatted.done(i, buffer);
                    }
                });
            }
            let written = (0..chunks.len()).try_for_each(|i| {
                let buffer =
                    formatted.wait_for(i).ok_or_else(|| io::Error::other("formatting spans failed"))?;
                let result = out.write_all(&buffer);
                formatted.written(buffer);
                result
            });
            formatted.stop();
            written
        })
    }
}

const DUR: &[u8] = b",\"dur\":";

/// Spans formatted at a time (about 700 KB of JSON) ...
const CHUNK: usize = 4096;
/// ... into buffers of this many bytes to start with.
const CHUNK_CAPACITY: usize = CHUNK * 256;
/// Formatted chunks waiting to be written, at most.
const AHEAD: usize = 16;

impl Appended for SpansJson {
    fn write_to(&self, out: &mut dyn Write) -> io::Result<()> {
        self.write_with(out, self.workers)
    }
}

/// Chunks formatted by several threads and written in order by one, with at most
/// [`AHEAD`] waiting (their buffers reused).
struct Formatted {
    state: Mutex<FormattedState>,
    changed: Condvar,
}

struct FormattedState {
    /// The next chunk to hand out and the next to write.
    next: usize,
    writing: usize,
    /// Each chunk's JSON, from when it is formatted until it is written.
    ready: Vec<Option<Vec<u8>>>,
    spare: Vec<Vec<u8>>,
    stopped: bool,
}

impl Formatted {
    fn new(count: usize) -> Formatted {
        let state = FormattedState {
            next: 0,
            writing: 0,
            ready: (0..count).map(|_| None).collect(),
            spare: Vec::new(),
            stopped: false,
        };
        Formatted { state: Mutex::new(state), changed: Condvar::new() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FormattedState> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A chunk to format and an empty buffer for it, once it is within [`AHEAD`] of
    /// the one being written; `None` when all are handed out or writing stopped.
    fn next_to_format(&self) -> Option<(usize, Vec<u8>)> {
        let mut state = self.lock();
        while !state.stopped && state.next < state.ready.len() && state.next >= state.writing + AHEAD {
            state = self.changed.wait(state).unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        if state.stopped || state.next == state.ready.len() {
            return None;
        }
        let i = state.next;
        state.next += 1;
        let buffer = state.spare.pop().unwrap_or_else(|| Vec::with_capacity(CHUNK_CAPACITY));
        Some((i, buffer))
    }

    fn done(&self, i: usize, buffer: Vec<u8>) {
        self.lock().ready[i] = Some(buffer);
        self.changed.notify_all();
    }

    /// Chunk `i`'s JSON, once formatted; `None` if formatting stopped before it.
    fn wait_for(&self, i: usize) -> Option<Vec<u8>> {
        let mut state = self.lock();
        loop {
            if let Some(buffer) = state.ready[i].take() {
                state.writing = i + 1;
                drop(state);
                self.changed.notify_all();
                return Some(buffer);
            }
            if state.stopped {
                return None;
            }
            state = self.changed.wait(state).unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }

    fn written(&self, mut buffer: Vec<u8>) {
        buffer.clear();
        self.lock().spare.push(buffer);
    }

    fn stop(&self) {
        self.lock().stopped = true;
        self.changed.notify_all();
    }
}

struct StopOnPanic<'a>(&'a Formatted);

impl Drop for StopOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.stop();
        }
    }
}

/// Nanoseconds as JSON microseconds: an integer where they are whole and the trace
/// writes integer times, else with three decimals.
fn push_micros(out: &mut Vec<u8>, ns: i128, integer: bool) {
    if ns < 0 {
        out.push(b'-');
    }
    let ns = ns.unsigned_abs();
    // dividing 64 bits is much faster, and times fit them
    let (whole, frac) = match u64::try_from(ns) {
        Ok(ns) => ((ns / 1000) as u128, (ns % 1000) as u32),
        Err(_) => (ns / 1000, (ns % 1000) as u32),
    };
    push_digits(out, whole);
    if !(integer && frac == 0) {
        out.extend_from_slice(&[
            b'.',
            b'0' + (frac / 100) as u8,
            b'0' + (frac / 10 % 10) as u8,
            b'0' + (frac % 10) as u8,
        ]);
    }
}

/// "00", "01", ... "99": digits are written two at a time.
const DIGIT_PAIRS: [u8; 200] = {
    let mut pairs = [0u8; 200];
    let mut i = 0;
    while i < 100 {
        pairs[2 * i] = b'0' + (i / 10) as u8;
        pairs[2 * i + 1] = b'0' + (i % 10) as u8;
        i += 1;
    }
    pairs
};

/// The decimal digits of `n` (formatting a 128-bit number is slow; these mostly fit 64 bits).
fn push_digits(out: &mut Vec<u8>, n: u128) {
    let Ok(mut n) = u64::try_from(n) else {
        out.extend_from_slice(n.to_string().as_bytes());
        return;
    };
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    while n >= 10 {
        let pair = (n % 100) as usize * 2;
        at -= 2;
        digits[at..at + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
        n /= 100;
    }
    // a leading zero where the last pair was the top two digits
    if n > 0 || at == digits.len() {
        at -= 1;
        digits[at] = b'0' + n as u8;
    }
    out.extend_from_slice(&digits[at..]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::keys::Key;

    /// Two lanes of spans: enough for several buffers, and times at the ends of what
    /// spans hold.
    fn spans(index: &mut TraceIndex) -> Spans {
        let mut lane = |tid| (NONE, index.keys.id(Key::Int(tid)), Spelling::Plain, Spelling::Plain);
        let lanes = vec![lane(7), lane(8)];
        let names = vec!["model".to_string(), "model.layers.0".to_string(), "x\"y".to_string()];
        let many = (0..5_000).map(|i| Span {
            name: i as u32 % 2,
            integer: i % 3 == 0,
            start: i as i64 * 1_500,
            end: i as i64 * 1_500 + 999,
        });
        let extremes = [
            Span { name: 2, integer: false, start: i64::MIN, end: i64::MAX },
            Span { name: 0, integer: true, start: i64::MAX - 1, end: i64::MAX },
            Span { name: 1, integer: true, start: 0, end: 5_000 },
        ];
        Spans { names, lanes, base: -(1 << 70), spans: vec![many.collect(), extremes.to_vec()] }
    }

    #[test]
    fn spans_are_written_as_trace_events() {
        let mut index = TraceIndex::default();
        let spans = spans(&mut index);
        let expected: Vec<(usize, Span)> = spans
            .spans
            .iter()
            .enumerate()
            .flat_map(|(lane, s)| s.iter().map(move |&span| (lane, span)))
            .collect();
        let (names, base) = (spans.names.clone(), spans.base);
        let json = SpansJson::new(spans, &index, "module", 4);
        let mut out = Vec::new();
        json.write_to(&mut out).unwrap();
        let events: Vec<serde_json::Value> =
            serde_json::from_slice(&[b"[".as_slice(), &out, b"]"].concat()).expect("JSON elements");
        assert_eq!(events.len(), expected.len());
        for (event, (lane, span)) in events.iter().zip(&expected) {
            let micros = |ns| {
                let mut text = Vec::new();
                push_micros(&mut text, ns, span.integer);
                serde_json::from_slice::<serde_json::Value>(&text).unwrap()
            };
            let expected = serde_json::json!({
                "ph": "X", "cat": "gpu_user_annotation", "name": names[span.name as usize],
                "pid": 0, "tid": 7 + *lane,
                "ts": micros(base + span.start as i128),
                "dur": micros(span.end as i128 - span.start as i128),
                "args": {"cgfast": "scope", "key": "module"},
            });
            assert_eq!(event, &expected);
        }
    }

    /// `count` spans over two lanes, of several names.
    fn many_spans(index: &mut TraceIndex, count: usize) -> SpansJson {
        let mut lane = |tid| (NONE, index.keys.id(Key::Int(tid)), Spelling::Plain, Spelling::Plain);
        let lanes = vec![lane(1), lane(2)];
        let names = (0..50).map(|i| format!("model.layers.{i}")).collect();
        let lane_spans = |offset: i64| {
            (0..count / 2)
                .map(|i| Span {
                    name: (i % 50) as u32,
                    integer: i % 7 == 0,
                    start: offset + i as i64 * 1_001,
                    end: offset + i as i64 * 1_001 + 77,
                })
                .collect()
        };
        let spans =
            Spans { names, lanes, base: 1_700_000_000_000_000, spans: vec![lane_spans(0), lane_spans(5)] };
        SpansJson::new(spans, index, "module", 4)
    }

    #[test]
    fn spans_formatted_on_several_threads_are_written_in_order() {
        let mut index = TraceIndex::default();
        // more chunks than are held ahead
        let json = many_spans(&mut index, 2 * (AHEAD + 5) * CHUNK + 3);
        let mut alone = Vec::new();
        json.write_with(&mut alone, 0).unwrap();
        let events: Vec<serde_json::Value> =
            serde_json::from_slice(&[b"[".as_slice(), &alone, b"]"].concat()).expect("JSON elements");
        assert_eq!(events.len(), 2 * (AHEAD + 5) * CHUNK + 2);
        for workers in [1, 3, 6] {
            let mut together = Vec::new();
            json.write_with(&mut together, workers).unwrap();
            assert!(together == alone, "{workers} workers");
        }
    }

    /// Takes `room` bytes, then fails.
    struct Full {
        room: usize,
    }

    impl Write for Full {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.room == 0 {
                return Err(io::Error::other("disk full"));
            }
            let n = buf.len().min(self.room);
            self.room -= n;
            Ok(n)
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_failed_write_stops_the_formatting() {
        let mut index = TraceIndex::default();
        let json = many_spans(&mut index, 4 * AHEAD * CHUNK);
        for workers in [0, 4] {
            let error = json.write_with(&mut Full { room: 3 << 20 }, workers).unwrap_err();
            assert_eq!(error.to_string(), "disk full");
        }
    }

    /// How fast spans are formatted on one thread (not a check: a measurement, run by
    /// hand): `cargo test --release -p cgfast-core --lib span_formatting_speed -- --ignored --nocapture`.
    #[test]
    #[ignore = "a measurement"]
    fn span_formatting_speed() {
        let mut index = TraceIndex::default();
        let json = many_spans(&mut index, 600_000);
        for _ in 0..5 {
            let t = std::time::Instant::now();
            json.write_with(&mut io::sink(), 0).unwrap();
            println!("600,000 spans formatted in {:.1} ms", t.elapsed().as_secs_f64() * 1e3);
        }
    }

    #[test]
    fn durations_are_written_in_microseconds() {
        let mut out = Vec::new();
        push_micros(&mut out, 2_500, false);
        out.push(b' ');
        push_micros(&mut out, 3_000, true);
        out.push(b' ');
        push_micros(&mut out, 3_000, false);
        out.push(b' ');
        push_micros(&mut out, 7, true);
        out.push(b' ');
        push_micros(&mut out, -1_234_567, false);
        out.push(b' ');
        push_micros(&mut out, 1_733_212_345_678_901_234_000, true);
        out.push(b' ');
        push_micros(&mut out, i128::MAX / 1000 * 1000, true);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!("2.500 3 3.000 0.007 -1234.567 1733212345678901234 {}", i128::MAX / 1000)
        );
    }

    #[test]
    fn digits_are_those_rust_writes() {
        let powers = (0..39).flat_map(|p| {
            let n = 10u128.pow(p);
            [n - 1, n, n + 1, n.saturating_mul(7) - 3]
        });
        for n in (0..=1_000).chain(powers).chain([u64::MAX as u128, u64::MAX as u128 + 1, u128::MAX]) {
            let mut out = Vec::new();
            push_digits(&mut out, n);
            assert_eq!(String::from_utf8(out).unwrap(), n.to_string());
        }
    }
}
