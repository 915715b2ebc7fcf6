//! The fields of one event that the index needs, read from the input: by the general
//! reader ([`read`]), which takes any JSON and reports every error, or first by a fast
//! path ([`read_fast`]) for events shaped as profilers write them.

use crate::json::{
    after_ws, number_end, plain_string_end, small_int_array_end, text_of, Cursor, Scalar, Scan, StrSpan,
};

/// Keys that annotations may write into `args`. An event whose `args` already has one
/// is edited through a full parse in pass two; every other edit splices at the places
/// recorded here.
#[derive(Default, Debug)]
pub(crate) struct WriteKeys {
    /// The keys by length (up to `SHORT`), compared byte by byte: fewer and cheaper than
    /// hashing every key of every event.
    by_length: Vec<Vec<Vec<u8>>>,
    long: rustc_hash::FxHashSet<Vec<u8>>,
    /// A bit per (length, first byte, last byte) of the keys: most keys of most events
    /// are told apart by it alone.
    sketch: u64,
}

const SHORT: usize = 64;

impl WriteKeys {
    pub(crate) fn new<'a>(keys: impl IntoIterator<Item = &'a str>) -> WriteKeys {
        let mut w = WriteKeys { by_length: vec![Vec::new(); SHORT], long: Default::default(), sketch: 0 };
        for k in keys {
            if k == "stream" || k == "graph node id" {
                continue;
            }
            w.sketch |= sketch_bit(k.as_bytes());
            match w.by_length.get_mut(k.len()) {
                Some(same) if !same.iter().any(|s| s == k.as_bytes()) => same.push(k.as_bytes().to_vec()),
                Some(_) => {}
                None => {
                    w.long.insert(k.as_bytes().to_vec());
                }
            }
        }
        w
    }

    #[inline(always)]
    pub(crate) fn contains(&self, key: &[u8]) -> bool {
        if self.sketch & sketch_bit(key) == 0 {
            return false;
        }
        match self.by_length.get(key.len()) {
            Some(same) => same.iter().any(|s| s == key),
            None => !self.long.is_empty() && self.long.contains(key),
        }
    }
}

#[inline(always)]
fn sketch_bit(key: &[u8]) -> u64 {
    let (first, last) = (key.first().copied().unwrap_or(0), key.last().copied().unwrap_or(0));
    1 << (((key.len() as u64).wrapping_mul(7) ^ first as u64 ^ (last as u64).rotate_left(3)) % 64)
}

/// Raw fields of one event, as spans into the window.
#[derive(Default, Debug, PartialEq)]
pub(crate) struct Raw {
    pub(crate) tid_at: Option<(usize, usize)>,
    pub(crate) ts_at: Option<(usize, usize)>,
    pub(crate) stream_at: Option<(usize, usize)>,
    pub(crate) node_at: Option<(usize, usize)>,
    pub(crate) args_close: Option<usize>,
    pub(crate) args_empty: bool,
    pub(crate) args_conflict: bool,
    pub(crate) ph: Option<Scalar>,
    pub(crate) cat: Option<Scalar>,
    pub(crate) name: Option<Scalar>,
    pub(crate) pid: Option<Scalar>,
    pub(crate) tid: Option<Scalar>,
    pub(crate) ts: Option<Scalar>,
    pub(crate) dur: Option<Scalar>,
    pub(crate) args: Option<Scalar>,
    pub(crate) args_object: bool,
    pub(crate) gni: Option<Scalar>,
    pub(crate) correlation: Option<Scalar>,
    pub(crate) args_name: Option<Scalar>,
    pub(crate) args_stream: Option<Scalar>,
    /// `args["cgfast"]` (`"scope"` on cgfast's own scope spans).
    pub(crate) args_cgfast: Option<Scalar>,
    /// `args["graph id"]`, which torch 2.15 writes beside a local `graph node id`.
    pub(crate) graph_id: Option<Scalar>,
    /// `args["original_stream"]`: an earlier run (or torch's export) moved the event.
    pub(crate) original_stream: bool,
    pub(crate) grid: Option<Scalar>,
    pub(crate) block: Option<Scalar>,
}

impl Raw {
    /// An `args` member begins: what an earlier one gave is forgotten.
    fn start_args(&mut self) {
        (self.gni, self.correlation, self.args_name, self.args_stream, self.grid, self.block) =
            (None, None, None, None, None, None);
        (self.args_cgfast, self.graph_id, self.original_stream) = (None, None, false);
        (self.stream_at, self.node_at, self.args_conflict) = (None, None, false);
        (self.args_object, self.args_close) = (false, None);
    }

    /// `args` is the object from `start` to `end`, with `members` members.
    fn finish_args(&mut self, start: usize, end: usize, members: u32) {
        self.args = Some(Scalar::Container { start, end });
        self.args_object = true;
        self.args_close = Some(end - 1);
        self.args_empty = members == 0;
    }
}

#[inline(always)]
fn key_bytes<'b>(buf: &'b [u8], k: StrSpan, scratch: &'b mut String) -> &'b [u8] {
    if !k.escaped {
        return &buf[k.start..k.end];
    }
    *scratch = text_of(buf, k).into_owned();
    scratch.as_bytes()
}

/// A scalar and where it is in the window.
#[inline(always)]
fn spanned(c: &mut Cursor<'_>) -> Scan<(Scalar, (usize, usize))> {
    c.peek()?;
    let start = c.pos;
    let v = c.scalar()?;
    Ok((v, (start, c.pos)))
}

/// A grid or block value: mostly `[x, y, z]`, read without the general scanner.
#[inline(always)]
fn dims_value(c: &mut Cursor<'_>) -> Scan<Scalar> {
    c.peek()?;
    match c.small_int_array() {
        Some(v) => Ok(v),
        None => c.scalar(),
    }
}

/// The general reader: any event, every error. The cursor must be at the event's `{`.
pub(crate) fn read(c: &mut Cursor<'_>, raw: &mut Raw, write_keys: &WriteKeys) -> Scan<()> {
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
                raw.start_args();
                if c.peek()? == b'{' {
                    let start = c.pos;
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
                            b"cgfast" => raw.args_cgfast = Some(c.scalar()?),
                            b"graph id" => raw.graph_id = Some(c.scalar()?),
                            b"original_stream" => {
                                raw.original_stream = true;
                                c.skip_value()?
                            }
                            b"stream" => {
                                let (v, at) = spanned(c)?;
                                raw.args_stream = Some(v);
                                raw.stream_at = Some(at);
                            }
                            b"grid" => raw.grid = Some(dims_value(c)?),
                            b"block" => raw.block = Some(dims_value(c)?),
                            _ => c.skip_value()?,
                        }
                        Ok(())
                    })?;
                    raw.finish_args(start, c.pos, members);
                } else {
                    raw.args = Some(c.scalar()?);
                }
            }
            _ => c.skip_value()?,
        }
        Ok(())
    })
}

/// The fast path: the event at `start` (its `{`) and the offset after its `}`, with
/// `raw` as [`read`] fills it. It takes keys without escapes and values that are
/// strings without escapes, numbers, literals, an `args` object of such values and flat
/// arrays of small integers; for anything else, and for an event that runs past the
/// window's end, it returns `None` and the event is the general reader's.
pub(crate) fn read_fast(buf: &[u8], start: usize, raw: &mut Raw, write_keys: &WriteKeys) -> Option<usize> {
    if buf.get(start) != Some(&b'{') {
        return None;
    }
    *raw = Raw::default();
    let mut r = Plain { buf, i: start };
    r.members(|r, key| {
        match key {
            b"ph" => raw.ph = Some(r.scalar()?),
            b"cat" => raw.cat = Some(r.scalar()?),
            b"name" => raw.name = Some(r.scalar()?),
            b"pid" => raw.pid = Some(r.scalar()?),
            b"tid" => (raw.tid, raw.tid_at) = r.spanned()?,
            b"ts" => (raw.ts, raw.ts_at) = r.spanned()?,
            b"dur" => raw.dur = Some(r.scalar()?),
            b"args" => r.args(raw, write_keys)?,
            _ => {
                r.scalar()?;
            }
        }
        Some(())
    })?;
    Some(r.i)
}

type Spanned = (Option<Scalar>, Option<(usize, usize)>);

/// A reader of the plain JSON that the fast path takes; every method returns `None` at
/// anything else.
struct Plain<'a> {
    buf: &'a [u8],
    i: usize,
}

impl<'a> Plain<'a> {
    /// The next byte that is not white space, not consumed.
    #[inline(always)]
    fn peek(&mut self) -> Option<u8> {
        let (at, b) = after_ws(self.buf, self.i)?;
        self.i = at;
        Some(b)
    }

    /// The members of the object at the cursor (after white space): `member(self, key)`
    /// with the cursor at each value, which it must consume. Returns how many there were.
    #[inline(always)]
    fn members(&mut self, mut member: impl FnMut(&mut Self, &'a [u8]) -> Option<()>) -> Option<u32> {
        self.i += 1;
        if self.peek()? == b'}' {
            self.i += 1;
            return Some(0);
        }
        let mut count = 0;
        loop {
            if self.buf[self.i] != b'"' {
                return None;
            }
            let key = self.string()?;
            self.separator(b':')?;
            let buf = self.buf;
            member(self, &buf[key.start..key.end])?;
            count += 1;
            match self.peek()? {
                b',' => self.separator(b',')?,
                b'}' => {
                    self.i += 1;
                    return Some(count);
                }
                _ => return None,
            }
        }
    }

    /// `sep` (after white space) and the white space after it; the cursor then at the
    /// next byte. Profilers write `sep` and one space: that is looked for first.
    #[inline(always)]
    fn separator(&mut self, sep: u8) -> Option<()> {
        if let Some(&[s, b' ', next]) = self.buf.get(self.i..self.i + 3) {
            if s == sep && next > b' ' {
                self.i += 2;
                return Some(());
            }
        }
        if self.peek()? != sep {
            return None;
        }
        self.i += 1;
        self.peek()?;
        Some(())
    }

    /// A string without escapes; the cursor at its quote.
    #[inline(always)]
    fn string(&mut self) -> Option<StrSpan> {
        let end = plain_string_end(self.buf, self.i)?;
        let start = self.i + 1;
        self.i = end + 1;
        Some(StrSpan { start, end, escaped: false })
    }

    /// A value that is no container; the cursor at its first byte.
    #[inline(always)]
    fn scalar(&mut self) -> Option<Scalar> {
        match self.buf[self.i] {
            b'"' => self.string().map(Scalar::Str),
            b'-' | b'0'..=b'9' => self.number(),
            b't' => self.literal(b"true", Scalar::Bool(true)),
            b'f' => self.literal(b"false", Scalar::Bool(false)),
            b'n' => self.literal(b"null", Scalar::Null),
            _ => None,
        }
    }

    /// A scalar and where it is, as [`Raw`] keeps them.
    #[inline(always)]
    fn spanned(&mut self) -> Option<Spanned> {
        let start = self.i;
        let value = self.scalar()?;
        Some((Some(value), Some((start, self.i))))
    }

    #[inline(always)]
    fn literal(&mut self, word: &[u8], value: Scalar) -> Option<Scalar> {
        let end = self.i + word.len();
        if self.buf.get(self.i..end)? != word {
            return None;
        }
        self.i = end;
        Some(value)
    }

    /// A number as JSON writes it (not `NaN` or the infinities).
    #[inline(always)]
    fn number(&mut self) -> Option<Scalar> {
        let start = self.i;
        self.i = number_end(self.buf, start).ok()?;
        Some(Scalar::Number { start, end: self.i })
    }

    /// A grid or block value.
    #[inline(always)]
    fn dims(&mut self) -> Option<Scalar> {
        if self.buf[self.i] != b'[' {
            return self.scalar();
        }
        let start = self.i;
        self.i = small_int_array_end(self.buf, start)?;
        Some(Scalar::Container { start, end: self.i })
    }

    /// `args`: the fields [`read`] takes from it.
    #[inline(always)]
    fn args(&mut self, raw: &mut Raw, write_keys: &WriteKeys) -> Option<()> {
        raw.start_args();
        if self.buf[self.i] != b'{' {
            raw.args = Some(self.scalar()?);
            return Some(());
        }
        let start = self.i;
        let count = self.members(|r, key| {
            if write_keys.contains(key) {
                raw.args_conflict = true;
            }
            match key {
                b"graph node id" => (raw.gni, raw.node_at) = r.spanned()?,
                b"correlation" => raw.correlation = Some(r.scalar()?),
                b"name" => raw.args_name = Some(r.scalar()?),
                b"cgfast" => raw.args_cgfast = Some(r.scalar()?),
                b"graph id" => raw.graph_id = Some(r.scalar()?),
                b"original_stream" => {
                    raw.original_stream = true;
                    r.scalar()?;
                }
                b"stream" => (raw.args_stream, raw.stream_at) = r.spanned()?,
                b"grid" => raw.grid = Some(r.dims()?),
                b"block" => raw.block = Some(r.dims()?),
                _ => {
                    r.scalar()?;
                }
            }
            Some(())
        })?;
        raw.finish_args(start, self.i, count);
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    /// The events of a bundled example trace, as the bytes the profiler wrote.
    fn example_events(name: &str) -> Vec<Vec<u8>> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../examples")
            .join(name)
            .join("000000.h200.pt.trace.json.gz");
        let mut json = Vec::new();
        flate2::read::MultiGzDecoder::new(std::fs::File::open(&path).expect("bundled example"))
            .read_to_end(&mut json)
            .unwrap();
        let open =
            memchr::memmem::find(&json, b"\"traceEvents\"").expect("traceEvents") + json[..].len().min(13);
        let mut c = Cursor::new(&json, open + memchr::memchr(b'[', &json[open..]).unwrap() + 1);
        let mut events = Vec::new();
        while c.peek().unwrap() != b']' {
            let start = c.pos;
            c.skip_value().unwrap();
            events.push(json[start..c.pos].to_vec());
            if c.peek().unwrap() == b',' {
                c.pos += 1;
            }
        }
        events
    }

    const KERNEL: &str = r#"{"ph": "X", "cat": "kernel", "name": "triton_per_fused_gelu_mul_2", "pid": 0, "tid": 7, "ts": 5361804758621.358, "dur": 47.012, "args": {"External id": 5, "queued": 0, "device": 0, "context": 1, "stream": 7, "correlation": 5, "registers per thread": 128, "shared memory": 0, "blocks per SM": 0.969697, "warps per SM": 3.878788, "grid": [1, 1, 1], "block": [256, 1, 1], "est. achieved occupancy %": 6, "graph node id": 17179869185}}"#;

    /// Events the fast path must hand back, or read as the general reader does.
    const ODD: &[&str] = &[
        r#"{"ph": "f", "id": 5, "pid": 0, "tid": 7, "ts": 5361804758582.770, "cat": "ac2g", "name": "ac2g", "bp": "e"}"#,
        r#"{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":1.5e3,"dur":-2E-1,"args":{"graph node id":4294967296,"stream":7}}"#,
        "{\n\t\"ph\" :\r\n \"X\" ,  \"cat\":\"kernel\", \"args\" : { \"grid\" : [ 1 ,2, 3 ] , \"block\":[4,5,6]\n}\n}",
        r#"{"name": "a \"quoted\" name", "cat": "kernel", "args": {"graph node id": 1}}"#,
        r#"{"na\u006de": "escaped key", "cat": "kernel", "args": {"graph node id": 1}}"#,
        r#"{"cat": "kernel", "args": {"graph node id": 1, "labels": [[1], {"a": 2}]}}"#,
        r#"{"cat": "kernel", "args": [1, 2], "tid": "stream 7"}"#,
        r#"{"cat": "kernel", "args": null, "ts": NaN, "dur": -Infinity, "pid": Infinity}"#,
        r#"{"cat": "kernel", "args": {}, "ts": true, "dur": false, "tid": null}"#,
        r#"{"cat": "kernel", "args": {"graph node id": 1}, "args": {"stream": 3, "name": "stream 3"}}"#,
        r#"{"cat": "kernel", "args": {"grid": [01, 2, 3], "block": [1, 2, 3, 4], "graph node id": 123456789012345678901234567890}}"#,
        r#"{"cat": "kernel", "args": {"grid": [], "block": "x", "module": "m", "annotation": "a"}}"#,
        r#"{"cat": "gpu_memcpy", "ts": 0, "dur": 0.0, "args": {"graph node id": 0, "correlation": -0}}"#,
        r#"{"cat": "kernel", "pid": {"nested": [1, {"deeper": null}]}, "tid": [7]}"#,
        r#"{}"#,
        r#"{ }"#,
    ];

    /// What both readers make of `text`: the fast path's end and fields where it took
    /// the event, the general reader's result and fields.
    type Outcome = (usize, Raw);

    fn both(text: &[u8], keys: &WriteKeys) -> (Option<Outcome>, Scan<Outcome>) {
        let mut fast = Raw::default();
        let fast = read_fast(text, 0, &mut fast, keys).map(|end| (end, fast));
        let mut general = Raw::default();
        let mut c = Cursor::new(text, 0);
        let general = read(&mut c, &mut general, keys).map(|_| (c.pos, general));
        (fast, general)
    }

    fn mutations(text: &[u8], seed: u64, count: usize) -> Vec<Vec<u8>> {
        const BYTES: &[u8] = b"\"\\{}[],:09-.eEtfnNI \n\t\x01\x7fa\xc3";
        let mut state = seed | 1;
        let mut next = move |bound: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % bound as u64) as usize
        };
        (0..count)
            .map(|_| {
                let mut t = text.to_vec();
                for _ in 0..1 + next(3) {
                    let at = next(t.len() + 1);
                    match next(3) {
                        0 if at < t.len() => t[at] = BYTES[next(BYTES.len())],
                        1 if at < t.len() => {
                            t.remove(at);
                        }
                        _ => t.insert(at, BYTES[next(BYTES.len())]),
                    }
                }
                t
            })
            .collect()
    }

    #[test]
    fn the_fast_path_reads_what_the_general_reader_reads() {
        let keys = WriteKeys::new(["name", "module", "annotation", "layer", "stream"]);
        let mut corpus: Vec<Vec<u8>> =
            ["h200-compiled-transformer", "h200-compiled-training", "h200-eager-two-stream"]
                .iter()
                .flat_map(|name| example_events(name))
                .collect();
        let from_examples = corpus.len();
        corpus.extend(std::iter::once(KERNEL).chain(ODD.iter().copied()).map(|t| t.as_bytes().to_vec()));
        let mut taken = 0;
        let mut cases = 0;
        for (n, event) in corpus.iter().enumerate() {
            let mut texts = vec![event.clone()];
            // whole events (every one of ours, a sample of the examples'), every prefix of
            // ours, and mutations of each
            if n >= from_examples || n % 10 == 0 {
                texts.extend((0..event.len()).map(|k| event[..k].to_vec()));
                texts.extend(mutations(event, n as u64 + 1, if n >= from_examples { 2000 } else { 50 }));
            }
            for (k, text) in texts.iter().enumerate() {
                cases += 1;
                let (fast, general) = both(text, &keys);
                if let Some(fast) = fast {
                    if n < from_examples && k == 0 {
                        taken += 1;
                    }
                    let general = general.unwrap_or_else(|e| {
                        panic!(
                            "the fast path took what the general reader refuses ({e:?}): {}",
                            String::from_utf8_lossy(text)
                        )
                    });
                    assert_eq!(fast, general, "{}", String::from_utf8_lossy(text));
                }
            }
        }
        // the test means something only where the fast path takes most real events
        assert!(
            taken * 100 >= from_examples * 95,
            "the fast path took {taken} of {from_examples} example events"
        );
        assert!(cases > 50_000, "{cases}");
    }

    #[test]
    fn the_fast_path_takes_the_events_profilers_write() {
        let keys = WriteKeys::new(["module"]);
        for text in [KERNEL, ODD[0], ODD[1], ODD[2], ODD[8], ODD[12], ODD[14], ODD[15]] {
            let (fast, general) = both(text.as_bytes(), &keys);
            assert_eq!(fast.as_ref().map(|f| f.0), Some(text.len()), "{text}");
            assert_eq!(fast, general.ok());
        }
        for text in [ODD[3], ODD[4], ODD[5], ODD[6], ODD[7], ODD[10], ODD[13]] {
            assert_eq!(both(text.as_bytes(), &keys).0, None, "{text}");
        }
    }

    #[test]
    fn write_keys_are_told_apart_from_other_keys() {
        let keys = WriteKeys::new(["module", "name", "stream", "graph node id", &"k".repeat(80)]);
        for hit in ["module", "name", &"k".repeat(80)] {
            assert!(keys.contains(hit.as_bytes()), "{hit}");
        }
        for miss in ["stream", "graph node id", "modulE", "nam", "", "External id", "grid", &"k".repeat(79)] {
            assert!(!keys.contains(miss.as_bytes()), "{miss}");
        }
        assert!(!WriteKeys::default().contains(b"name"));
    }
}
