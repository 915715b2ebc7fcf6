//! A validating JSON scanner over a byte window: it finds the spans of values and
//! skips what it does not need, without building a tree.

pub mod edit;
pub mod value;

use memchr::memchr2;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScanError {
    /// The window ended inside a value; more input may complete it.
    Incomplete,
    /// The bytes are not JSON; `at` is the offset in the window.
    Syntax { at: usize, expected: &'static str },
}

pub type Scan<T> = Result<T, ScanError>;

/// A string value: `start..end` is the text between the quotes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StrSpan {
    pub start: usize,
    pub end: usize,
    pub escaped: bool,
}

/// A scalar found where the scanner was asked for one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scalar {
    Null,
    Bool(bool),
    /// A number token (also `NaN`, `Infinity`, `-Infinity`).
    Number {
        start: usize,
        end: usize,
    },
    Str(StrSpan),
    /// An object or an array, skipped.
    Container {
        start: usize,
        end: usize,
    },
}

pub struct Cursor<'a> {
    pub buf: &'a [u8],
    pub pos: usize,
    nesting: Vec<bool>,
}

/// The offset of the first byte at or after `from` that ends or interrupts a string's
/// plain text: `"`, `\\` or a control character.
#[inline(always)]
pub(crate) fn special_byte(buf: &[u8], from: usize) -> Option<usize> {
    #[cfg(all(target_arch = "x86_64", not(cgfast_portable)))]
    let (from, found) = special_byte_sse2(buf, from);
    // `--cfg cgfast_portable` tests the portable path on x86-64 too (scripts/test)
    #[cfg(any(not(target_arch = "x86_64"), cgfast_portable))]
    let (from, found) = special_byte_words(buf, from);
    match found {
        Some(at) => Some(at),
        None => buf[from..].iter().position(|&b| is_special(b)).map(|k| from + k),
    }
}

#[inline]
fn is_special(b: u8) -> bool {
    b == b'"' || b == b'\\' || b < 0x20
}

/// Sixteen bytes at a time; what is left of the buffer after the last whole block is
/// the caller's (the offset returned first).
#[cfg(all(target_arch = "x86_64", not(cgfast_portable)))]
#[inline]
fn special_byte_sse2(buf: &[u8], mut at: usize) -> (usize, Option<usize>) {
    use std::arch::x86_64::*;
    // SAFETY: SSE2 is part of every x86-64 processor, and each load reads the 16 bytes
    // `buf[at..at + 16]`, inside the slice.
    unsafe {
        let quote = _mm_set1_epi8(b'"' as i8);
        let backslash = _mm_set1_epi8(b'\\' as i8);
        let control_max = _mm_set1_epi8(0x1f);
        while at + 16 <= buf.len() {
            let v = _mm_loadu_si128(buf.as_ptr().add(at) as *const __m128i);
            let control = _mm_cmpeq_epi8(_mm_max_epu8(v, control_max), control_max);
            let hits =
                _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)), control);
            let mask = _mm_movemask_epi8(hits) as u32;
            if mask != 0 {
                return (at, Some(at + mask.trailing_zeros() as usize));
            }
            at += 16;
        }
    }
    (at, None)
}

/// Eight bytes at a time, in the bits of a word.
#[cfg(any(not(target_arch = "x86_64"), cgfast_portable))]
#[inline]
fn special_byte_words(buf: &[u8], mut at: usize) -> (usize, Option<usize>) {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    // Nonzero where a byte equals `byte` (exact for the lowest such byte).
    let equal = |word: u64, byte: u8| {
        let x = word ^ (LO * byte as u64);
        x.wrapping_sub(LO) & !x & HI
    };
    while at + 8 <= buf.len() {
        let word = u64::from_le_bytes(buf[at..at + 8].try_into().expect("8 bytes"));
        let hits = equal(word, b'"') | equal(word, b'\\') | (word.wrapping_sub(LO * 0x20) & !word & HI);
        if hits != 0 {
            return (at, Some(at + (hits.trailing_zeros() / 8) as usize));
        }
        at += 8;
    }
    (at, None)
}

#[inline]
fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\n' | b'\r' | b'\t')
}

/// The first byte at or after `i` that is not white space, and where it is; `None` where
/// `buf` ends first.
#[inline(always)]
pub(crate) fn after_ws(buf: &[u8], mut i: usize) -> Option<(usize, u8)> {
    let b = *buf.get(i)?;
    // white space is at most b' ': one comparison for the common case
    if b > b' ' {
        return Some((i, b));
    }
    // one space, as after the `:` and `,` of most traces
    if b == b' ' {
        let next = *buf.get(i + 1)?;
        if next > b' ' {
            return Some((i + 1, next));
        }
    }
    loop {
        let b = *buf.get(i)?;
        if !is_ws(b) {
            return Some((i, b));
        }
        i += 1;
    }
}

/// The closing quote of the string whose opening quote is at `quote`, where its text
/// holds no escape (and no control character); `None` otherwise, or where `buf` ends first.
#[inline(always)]
pub(crate) fn plain_string_end(buf: &[u8], quote: usize) -> Option<usize> {
    special_byte(buf, quote + 1).filter(|&at| buf[at] == b'"')
}

/// The end of the number at `start`, as JSON writes numbers (not `NaN` or the
/// infinities).
#[inline(always)]
pub(crate) fn number_end(buf: &[u8], start: usize) -> Scan<usize> {
    let at = |i: usize| buf.get(i).copied().ok_or(ScanError::Incomplete);
    let syntax = |at: usize, expected: &'static str| Err(ScanError::Syntax { at, expected });
    let mut i = start;
    if at(i)? == b'-' {
        i += 1;
    }
    match at(i)? {
        b'0' => i += 1,
        b'1'..=b'9' => {
            while at(i)?.is_ascii_digit() {
                i += 1;
            }
        }
        _ => return syntax(i, "a number"),
    }
    if at(i)? == b'.' {
        i += 1;
        if !at(i)?.is_ascii_digit() {
            return syntax(i, "a digit");
        }
        while at(i)?.is_ascii_digit() {
            i += 1;
        }
    }
    if matches!(at(i)?, b'e' | b'E') {
        i += 1;
        if matches!(at(i)?, b'+' | b'-') {
            i += 1;
        }
        if !at(i)?.is_ascii_digit() {
            return syntax(i, "a digit");
        }
        while at(i)?.is_ascii_digit() {
            i += 1;
        }
    }
    Ok(i)
}

/// The end of the flat array of small unsigned integers (`[1, 2, 3]`) at `start`;
/// `None` for any other value, even a valid one.
#[inline]
pub(crate) fn small_int_array_end(buf: &[u8], start: usize) -> Option<usize> {
    if buf.get(start) != Some(&b'[') {
        return None;
    }
    let mut i = start + 1;
    loop {
        let mut b = *buf.get(i)?;
        while is_ws(b) {
            i += 1;
            b = *buf.get(i)?;
        }
        let first = i;
        while b.is_ascii_digit() {
            i += 1;
            b = *buf.get(i)?;
        }
        if i == first || (i - first > 1 && buf[first] == b'0') {
            return None;
        }
        while is_ws(b) {
            i += 1;
            b = *buf.get(i)?;
        }
        match b {
            b',' => i += 1,
            b']' => return Some(i + 1),
            _ => return None,
        }
    }
}

impl<'a> Cursor<'a> {
    pub fn new(buf: &'a [u8], pos: usize) -> Self {
        Cursor { buf, pos, nesting: Vec::new() }
    }

    pub fn reset(&mut self, buf: &'a [u8], pos: usize) {
        self.buf = buf;
        self.pos = pos;
    }

    fn syntax<T>(&self, expected: &'static str) -> Scan<T> {
        Err(ScanError::Syntax { at: self.pos, expected })
    }

    /// The next byte that is not white space, not consumed.
    #[inline]
    pub fn peek(&mut self) -> Scan<u8> {
        match after_ws(self.buf, self.pos) {
            Some((at, b)) => {
                self.pos = at;
                Ok(b)
            }
            None => {
                self.pos = self.buf.len();
                Err(ScanError::Incomplete)
            }
        }
    }

    #[inline]
    pub fn expect(&mut self, byte: u8, expected: &'static str) -> Scan<()> {
        if self.peek()? == byte {
            self.pos += 1;
            Ok(())
        } else {
            self.syntax(expected)
        }
    }

    /// A string; the cursor must be at its opening quote (after white space).
    #[inline]
    pub fn string(&mut self) -> Scan<StrSpan> {
        if self.peek()? != b'"' {
            return self.syntax("a string");
        }
        let start = self.pos + 1;
        let mut i = start;
        let mut escaped = false;
        loop {
            let Some(at) = special_byte(self.buf, i) else { return Err(ScanError::Incomplete) };
            match self.buf[at] {
                b'"' => {
                    self.pos = at + 1;
                    return Ok(StrSpan { start, end: at, escaped });
                }
                b'\\' => {
                    escaped = true;
                    match self.buf.get(at + 1) {
                        None => return Err(ScanError::Incomplete),
                        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' | b'u') => i = at + 2,
                        Some(_) => {
                            self.pos = at;
                            return self.syntax("a valid escape");
                        }
                    }
                }
                _ => {
                    self.pos = at;
                    return self.syntax("no control character in a string (JSON requires escaping it)");
                }
            }
        }
    }

    /// An object's key: a string, mostly short and plain, found without leaving the
    /// caller.
    #[inline(always)]
    fn key(&mut self) -> Scan<StrSpan> {
        if self.peek()? == b'"' {
            if let Some(end) = plain_string_end(self.buf, self.pos) {
                let start = self.pos + 1;
                self.pos = end + 1;
                return Ok(StrSpan { start, end, escaped: false });
            }
        }
        self.string()
    }

    /// Skip a value known to be valid JSON (checked by an earlier pass): strings and
    /// brackets only, no grammar.
    pub fn skip_trusted(&mut self) -> Scan<()> {
        let buf = self.buf;
        let mut i = self.pos;
        let mut depth = 0usize;
        loop {
            let Some(&b) = buf.get(i) else { return Err(ScanError::Incomplete) };
            match b {
                b'"' => {
                    i += 1;
                    loop {
                        match memchr2(b'"', b'\\', &buf[i.min(buf.len())..]) {
                            None => return Err(ScanError::Incomplete),
                            Some(k) if buf[i + k] == b'"' => {
                                i += k + 1;
                                break;
                            }
                            Some(k) => i += k + 2,
                        }
                    }
                    if depth == 0 {
                        self.pos = i;
                        return Ok(());
                    }
                }
                b'{' | b'[' => {
                    depth += 1;
                    i += 1;
                }
                b'}' | b']' if depth > 0 => {
                    depth -= 1;
                    i += 1;
                    if depth == 0 {
                        self.pos = i;
                        return Ok(());
                    }
                }
                b',' | b'}' | b']' if depth == 0 => {
                    self.pos = i;
                    return Ok(());
                }
                _ => i += 1,
            }
        }
    }

    fn number(&mut self) -> Scan<(usize, usize)> {
        let start = self.pos;
        if self.buf.get(start) == Some(&b'-') && self.buf.get(start + 1) == Some(&b'I') {
            self.pos = start + 1;
            self.literal(b"Infinity")?;
            return Ok((start, self.pos));
        }
        match number_end(self.buf, start) {
            Ok(end) => {
                self.pos = end;
                Ok((start, end))
            }
            Err(e) => {
                if let ScanError::Syntax { at, .. } = e {
                    self.pos = at;
                }
                Err(e)
            }
        }
    }

    fn literal(&mut self, word: &'static [u8]) -> Scan<()> {
        let end = self.pos + word.len();
        if self.buf.len() < end {
            if word.starts_with(&self.buf[self.pos..]) {
                return Err(ScanError::Incomplete);
            }
            return self.syntax("a JSON value");
        }
        if &self.buf[self.pos..end] != word {
            return self.syntax("a JSON value");
        }
        self.pos = end;
        Ok(())
    }

    /// A value, classified; containers are validated and skipped.
    #[inline]
    pub fn scalar(&mut self) -> Scan<Scalar> {
        match self.peek()? {
            b'"' => Ok(Scalar::Str(self.string()?)),
            b'{' | b'[' => {
                let start = self.pos;
                self.skip_value()?;
                Ok(Scalar::Container { start, end: self.pos })
            }
            b't' => self.literal(b"true").map(|_| Scalar::Bool(true)),
            b'f' => self.literal(b"false").map(|_| Scalar::Bool(false)),
            b'n' => self.literal(b"null").map(|_| Scalar::Null),
            b'N' => {
                let start = self.pos;
                self.literal(b"NaN")?;
                Ok(Scalar::Number { start, end: self.pos })
            }
            b'I' => {
                let start = self.pos;
                self.literal(b"Infinity")?;
                Ok(Scalar::Number { start, end: self.pos })
            }
            b'-' | b'0'..=b'9' => {
                let (start, end) = self.number()?;
                Ok(Scalar::Number { start, end })
            }
            _ => self.syntax("a JSON value"),
        }
    }

    /// Validate and skip one value of any kind, without recursion.
    #[inline]
    pub fn skip_value(&mut self) -> Scan<()> {
        match self.peek()? {
            b'{' | b'[' => self.skip_container(),
            _ => self.scalar().map(|_| ()),
        }
    }

    /// A flat array of small unsigned integers (`[1, 2, 3]`), skipped; `None` (the
    /// cursor unmoved) for any other value, even a valid one.
    #[inline]
    pub fn small_int_array(&mut self) -> Option<Scalar> {
        let start = self.pos;
        self.pos = small_int_array_end(self.buf, start)?;
        Some(Scalar::Container { start, end: self.pos })
    }

    fn skip_container(&mut self) -> Scan<()> {
        self.nesting.clear();
        loop {
            // At a value.
            match self.peek()? {
                b'{' => {
                    self.pos += 1;
                    if self.peek()? == b'}' {
                        self.pos += 1;
                    } else {
                        self.nesting.push(true);
                        self.string()?;
                        self.expect(b':', "':'")?;
                        continue;
                    }
                }
                b'[' => {
                    self.pos += 1;
                    if self.peek()? == b']' {
                        self.pos += 1;
                    } else {
                        self.nesting.push(false);
                        continue;
                    }
                }
                b'"' => {
                    self.string()?;
                }
                _ => {
                    self.scalar()?;
                }
            }
            // After a value: close containers or move to the next member.
            loop {
                match self.nesting.last() {
                    None => return Ok(()),
                    Some(&is_object) => match self.peek()? {
                        b',' => {
                            self.pos += 1;
                            if is_object {
                                self.string()?;
                                self.expect(b':', "':'")?;
                            }
                            break;
                        }
                        b'}' if is_object => {
                            self.pos += 1;
                            self.nesting.pop();
                        }
                        b']' if !is_object => {
                            self.pos += 1;
                            self.nesting.pop();
                        }
                        _ => return self.syntax(if is_object { "',' or '}'" } else { "',' or ']'" }),
                    },
                }
            }
        }
    }

    /// Walk the members of the object at the cursor, calling `member(cursor, key)`
    /// with the cursor at each value; the callback must consume the value.
    #[inline]
    pub fn object<F>(&mut self, mut member: F) -> Scan<()>
    where
        F: FnMut(&mut Self, StrSpan) -> Scan<()>,
    {
        self.expect(b'{', "'{'")?;
        if self.peek()? == b'}' {
            self.pos += 1;
            return Ok(());
        }
        loop {
            let key = self.key()?;
            self.expect(b':', "':'")?;
            member(self, key)?;
            match self.peek()? {
                b',' => self.pos += 1,
                b'}' => {
                    self.pos += 1;
                    return Ok(());
                }
                _ => return self.syntax("',' or '}'"),
            }
        }
    }

    /// The bytes of a string span, unescaped when needed.
    pub fn text(&self, s: StrSpan) -> std::borrow::Cow<'a, str> {
        text_of(self.buf, s)
    }
}

/// The text of a string span of `buf`, unescaped when needed (lossy for invalid UTF-8).
pub fn text_of(buf: &[u8], s: StrSpan) -> std::borrow::Cow<'_, str> {
    let raw = &buf[s.start..s.end];
    if !s.escaped {
        if raw.is_ascii() {
            // SAFETY: ASCII is UTF-8.
            return std::borrow::Cow::Borrowed(unsafe { std::str::from_utf8_unchecked(raw) });
        }
        return match std::str::from_utf8(raw) {
            Ok(text) => std::borrow::Cow::Borrowed(text),
            Err(_) => String::from_utf8_lossy(raw),
        };
    }
    std::borrow::Cow::Owned(unescape(raw))
}

/// Whether the string span holds exactly `want` (escapes decoded).
#[inline(always)]
pub fn str_is(buf: &[u8], s: StrSpan, want: &str) -> bool {
    if !s.escaped {
        return &buf[s.start..s.end] == want.as_bytes();
    }
    unescape(&buf[s.start..s.end]) == want
}

fn unescape(raw: &[u8]) -> String {
    let mut out: Vec<u8> = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        if raw[i] != b'\\' || i + 1 >= raw.len() {
            out.push(raw[i]);
            i += 1;
            continue;
        }
        let c = raw[i + 1];
        i += 2;
        match c {
            b'n' => out.push(b'\n'),
            b't' => out.push(b'\t'),
            b'r' => out.push(b'\r'),
            b'b' => out.push(8),
            b'f' => out.push(12),
            b'u' => {
                let unit = |at: usize| {
                    raw.get(at..at + 4)
                        .and_then(|h| std::str::from_utf8(h).ok())
                        .and_then(|h| u32::from_str_radix(h, 16).ok())
                };
                let Some(hi) = unit(i) else {
                    out.extend_from_slice(b"\\u");
                    continue;
                };
                i += 4;
                let mut code = hi;
                if (0xd800..0xdc00).contains(&hi)
                    && raw.get(i) == Some(&b'\\')
                    && raw.get(i + 1) == Some(&b'u')
                {
                    if let Some(lo) = unit(i + 2).filter(|lo| (0xdc00..0xe000).contains(lo)) {
                        code = 0x10000 + ((hi - 0xd800) << 10) + (lo - 0xdc00);
                        i += 6;
                    }
                }
                let ch = char::from_u32(code).unwrap_or('\u{fffd}');
                let mut tmp = [0u8; 4];
                out.extend_from_slice(ch.encode_utf8(&mut tmp).as_bytes());
            }
            other => out.push(other),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `text` as a JSON string literal.
pub fn quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    push_quoted(&mut out, text);
    out
}

pub fn push_quoted(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skip(text: &str) -> Scan<usize> {
        let mut c = Cursor::new(text.as_bytes(), 0);
        c.skip_value().map(|_| c.pos)
    }

    #[test]
    fn skips_valid_values() {
        for v in [
            r#"{"a": [1, 2.5e-3, "x\"y", {"b": null}], "c": true}"#,
            "[]",
            "{}",
            "[-0.5]",
            "[NaN, 0]",
            "[-Infinity]",
            r#""\u00e9""#,
        ] {
            assert_eq!(skip(v), Ok(v.len()), "{v}");
        }
    }

    #[test]
    fn reports_truncation_and_garbage() {
        assert_eq!(skip(r#"{"a": [1, 2"#), Err(ScanError::Incomplete));
        assert_eq!(skip(r#""abc"#), Err(ScanError::Incomplete));
        assert!(matches!(skip(r#"{"a" 1}"#), Err(ScanError::Syntax { .. })));
        assert!(matches!(skip("[1,]"), Err(ScanError::Syntax { .. })));
        assert!(matches!(skip("01"), Ok(1)));
        assert!(matches!(skip("{\"a\":tru}"), Err(ScanError::Syntax { .. })));
        assert!(matches!(skip(r#""\q""#), Err(ScanError::Syntax { .. })));
        assert_eq!(
            skip("\"ab\x01c\""),
            Err(ScanError::Syntax {
                at: 3,
                expected: "no control character in a string (JSON requires escaping it)"
            })
        );
        let long = format!("\"{}\x1f\"", "x".repeat(200));
        assert!(matches!(skip(&long), Err(ScanError::Syntax { at: 201, .. })));
        assert_eq!(skip("\"tab\\t ok\""), Ok(10));
    }

    #[test]
    fn numbers_cut_by_the_window_are_incomplete() {
        for text in ["123", "12345678901234", "1.5", "1.23456789012", "1e5", "1.5E+123456789"] {
            assert_eq!(skip(text), Err(ScanError::Incomplete), "{text}");
            assert_eq!(skip(&format!("{text},")), Ok(text.len()), "{text}");
        }
    }

    #[test]
    fn deep_nesting_does_not_recurse() {
        let deep = "[".repeat(100_000) + &"]".repeat(100_000);
        assert_eq!(skip(&deep), Ok(deep.len()));
    }

    #[test]
    fn special_bytes_are_found_wherever_they_are() {
        // every offset of a block, and the tail after the last whole one, on the path
        // this build takes (SSE2, or the words of `--cfg cgfast_portable`)
        for len in 0..40 {
            for at in 0..=len {
                for special in [b'"', b'\\', 0x00, 0x1f] {
                    let mut buf = vec![b'a'; len];
                    buf.extend_from_slice(b" \x7f\xe9~");
                    let end = buf.len();
                    if at < end {
                        buf[at] = special;
                    }
                    for from in [0, at.min(3)] {
                        let want = buf[from..].iter().position(|&b| is_special(b)).map(|k| from + k);
                        assert_eq!(special_byte(&buf, from), want, "{len} {at} {special} {from}");
                    }
                }
            }
        }
    }

    #[test]
    fn unescapes_and_quotes() {
        let raw = r#"a\"b\\c\n\u00e9\ud83d\ude00"#;
        assert_eq!(unescape(raw.as_bytes()), "a\"b\\c\né😀");
        assert_eq!(quote("a\"b\n\u{1}"), r#""a\"b\n\u0001""#);
    }
}
