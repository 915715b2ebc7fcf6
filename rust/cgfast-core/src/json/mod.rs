//! A validating JSON scanner over a byte window: it finds the spans of values and
//! skips what it does not need, without building a tree.

mod bytes;
pub(crate) mod edit;
mod utf8;
pub(crate) mod value;

pub(crate) use bytes::{after_ws, number_end, plain_string_end, small_int_array_end, special_byte};
pub(crate) use utf8::InvalidUtf8;

use memchr::memchr2;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ScanError {
    /// The window ended inside a value; more input may complete it.
    Incomplete,
    /// The bytes are not JSON; `at` is the offset in the window.
    Syntax { at: usize, expected: &'static str },
}

pub(crate) type Scan<T> = Result<T, ScanError>;

/// A string value: `start..end` is the text between the quotes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StrSpan {
    pub(crate) start: usize,
    pub(crate) end: usize,
    pub(crate) escaped: bool,
}

/// A scalar found where the scanner was asked for one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scalar {
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

pub(crate) struct Cursor<'a> {
    pub(crate) buf: &'a [u8],
    pub(crate) pos: usize,
    nesting: Vec<bool>,
    /// The invalid UTF-8 in the strings read, by offset in `buf`, until the caller takes it.
    pub(crate) invalid_utf8: InvalidUtf8,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(buf: &'a [u8], pos: usize) -> Self {
        Cursor { buf, pos, nesting: Vec::new(), invalid_utf8: InvalidUtf8::default() }
    }

    fn syntax<T>(&self, expected: &'static str) -> Scan<T> {
        Err(ScanError::Syntax { at: self.pos, expected })
    }

    /// The next byte that is not white space, not consumed.
    #[inline]
    pub(crate) fn peek(&mut self) -> Scan<u8> {
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
    pub(crate) fn expect(&mut self, byte: u8, expected: &'static str) -> Scan<()> {
        if self.peek()? == byte {
            self.pos += 1;
            Ok(())
        } else {
            self.syntax(expected)
        }
    }

    /// A string; the cursor must be at its opening quote (after white space).
    #[inline]
    pub(crate) fn string(&mut self) -> Scan<StrSpan> {
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
                0x80.. => {
                    // the text that is not ASCII, up to what ends or interrupts the
                    // string, checked as UTF-8 at once
                    let Some(end) = bytes::special_ascii_byte(self.buf, at) else {
                        return Err(ScanError::Incomplete);
                    };
                    self.invalid_utf8.check(&self.buf[at..end], at);
                    i = end;
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
    pub(crate) fn skip_trusted(&mut self) -> Scan<()> {
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
    pub(crate) fn scalar(&mut self) -> Scan<Scalar> {
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
    pub(crate) fn skip_value(&mut self) -> Scan<()> {
        match self.peek()? {
            b'{' | b'[' => self.skip_container(),
            _ => self.scalar().map(|_| ()),
        }
    }

    /// A flat array of small unsigned integers (`[1, 2, 3]`), skipped; `None` (the
    /// cursor unmoved) for any other value, even a valid one.
    #[inline]
    pub(crate) fn small_int_array(&mut self) -> Option<Scalar> {
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
    pub(crate) fn object<F>(&mut self, mut member: F) -> Scan<()>
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
    pub(crate) fn text(&self, s: StrSpan) -> std::borrow::Cow<'a, str> {
        text_of(self.buf, s)
    }
}

/// The text of a string span of `buf`, unescaped when needed (lossy for invalid UTF-8).
pub(crate) fn text_of(buf: &[u8], s: StrSpan) -> std::borrow::Cow<'_, str> {
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
pub(crate) fn str_is(buf: &[u8], s: StrSpan, want: &str) -> bool {
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
pub(crate) fn quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    push_quoted(&mut out, text);
    out
}

pub(crate) fn push_quoted(out: &mut String, text: &str) {
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
    fn unescapes_and_quotes() {
        let raw = r#"a\"b\\c\n\u00e9\ud83d\ude00"#;
        assert_eq!(unescape(raw.as_bytes()), "a\"b\\c\né😀");
        assert_eq!(quote("a\"b\n\u{1}"), r#""a\"b\n\u0001""#);
    }
}
