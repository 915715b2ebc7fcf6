//! Numbers and lane keys with Python's semantics: `7 == 7.0 == True` as dict keys,
//! `int + float` is a float, and comparisons are exact.

use rustc_hash::FxHashMap as HashMap;
use std::cmp::Ordering;

use crate::annotations::value::py_float_repr;

/// A JSON number as Python's `json` module reads it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Num {
    Int(i64),
    Float(f64),
}

impl Num {
    pub(crate) const ZERO: Num = Num::Int(0);

    pub(crate) fn as_f64(self) -> f64 {
        match self {
            Num::Int(i) => i as f64,
            Num::Float(f) => f,
        }
    }

    pub(crate) fn py_add(self, other: Num) -> Num {
        match (self, other) {
            (Num::Int(a), Num::Int(b)) => {
                a.checked_add(b).map(Num::Int).unwrap_or(Num::Float(a as f64 + b as f64))
            }
            (a, b) => Num::Float(a.as_f64() + b.as_f64()),
        }
    }

    pub(crate) fn py_sub(self, other: Num) -> Num {
        match (self, other) {
            (Num::Int(a), Num::Int(b)) => {
                a.checked_sub(b).map(Num::Int).unwrap_or(Num::Float(a as f64 - b as f64))
            }
            (a, b) => Num::Float(a.as_f64() - b.as_f64()),
        }
    }

    pub(crate) fn lt(self, other: Num) -> bool {
        self.py_cmp(other) == Some(Ordering::Less)
    }

    /// Python's comparison; `None` when either side is NaN.
    pub(crate) fn py_cmp(self, other: Num) -> Option<Ordering> {
        match (self, other) {
            (Num::Int(a), Num::Int(b)) => Some(a.cmp(&b)),
            (Num::Int(a), Num::Float(b)) => cmp_int_float(a, b),
            (Num::Float(a), Num::Int(b)) => cmp_int_float(b, a).map(Ordering::reverse),
            (Num::Float(a), Num::Float(b)) => a.partial_cmp(&b),
        }
    }

    /// The number as `json.dumps` writes it (non-finite floats as Python writes them).
    pub(crate) fn to_json(self) -> String {
        match self {
            Num::Int(i) => i.to_string(),
            Num::Float(f) if f.is_nan() => "NaN".into(),
            Num::Float(f) if f.is_infinite() => {
                if f > 0.0 {
                    "Infinity".into()
                } else {
                    "-Infinity".into()
                }
            }
            Num::Float(f) => py_float_repr(f),
        }
    }

    /// Parse a JSON number token (or Python's `NaN`/`Infinity` extensions).
    #[inline]
    pub(crate) fn parse(token: &[u8]) -> Option<Num> {
        match parse_short(token) {
            Some(n) => Some(n),
            None => Num::parse_any(token),
        }
    }

    /// What [`parse_short`] leaves: long numbers, exponents, `NaN` and the infinities.
    #[inline(never)]
    fn parse_any(token: &[u8]) -> Option<Num> {
        match token {
            b"NaN" => return Some(Num::Float(f64::NAN)),
            b"Infinity" => return Some(Num::Float(f64::INFINITY)),
            b"-Infinity" => return Some(Num::Float(f64::NEG_INFINITY)),
            _ => {}
        }
        if token.iter().any(|b| matches!(b, b'.' | b'e' | b'E')) {
            parse_decimal(token)
                .or_else(|| std::str::from_utf8(token).ok()?.parse::<f64>().ok())
                .map(Num::Float)
        } else {
            parse_int(token).map(Num::Int)
        }
    }
}

/// Powers of ten that are exact as `f64`.
const POW10: [f64; 19] =
    [1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18];

/// A number token as its sign and the rest; `None` when it is empty.
#[inline]
fn split_sign(token: &[u8]) -> Option<(bool, &[u8])> {
    match token.first()? {
        b'-' => Some((true, &token[1..])),
        _ => Some((false, token)),
    }
}

/// The common shapes in one pass: `-?digits` and `-?digits.digits` of at most 18
/// digits in all (the integer part of a fraction at most 2**53); `None` for anything
/// else, which [`Num::parse_any`] reads. The results are those of `parse_int` and
/// `parse_decimal`.
#[inline]
fn parse_short(token: &[u8]) -> Option<Num> {
    let (negative, body) = split_sign(token)?;
    if body.is_empty() || body.len() > 19 {
        return None;
    }
    let mut m: u64 = 0;
    let mut dot = None;
    for (i, &b) in body.iter().enumerate() {
        match b {
            b'0'..=b'9' => m = m * 10 + (b - b'0') as u64,
            b'.' if dot.is_none() && i > 0 => dot = Some(i),
            _ => return None,
        }
    }
    match dot {
        None if body.len() <= 18 => Some(Num::Int(if negative { -(m as i64) } else { m as i64 })),
        Some(d) if d + 1 < body.len() && m <= 1 << 53 => {
            let v = m as f64 / POW10[body.len() - d - 1];
            Some(Num::Float(if negative { -v } else { v }))
        }
        _ => None,
    }
}

/// `digits.fraction` whose digits make an integer of at most 2**53, exactly: such an
/// integer divided by an exact power of ten is correctly rounded (the fast path of
/// Clinger's algorithm).
fn parse_decimal(token: &[u8]) -> Option<f64> {
    let (negative, body) = split_sign(token)?;
    let dot = body.iter().position(|&b| b == b'.')?;
    let (int_part, frac_part) = (&body[..dot], &body[dot + 1..]);
    if int_part.is_empty() || frac_part.is_empty() || int_part.len() + frac_part.len() > 18 {
        return None;
    }
    let mut m: u64 = 0;
    for &d in int_part.iter().chain(frac_part) {
        if !d.is_ascii_digit() {
            return None;
        }
        m = m * 10 + (d - b'0') as u64;
    }
    if m > 1 << 53 {
        return None;
    }
    let v = m as f64 / POW10[frac_part.len()];
    Some(if negative { -v } else { v })
}

fn parse_int(token: &[u8]) -> Option<i64> {
    let (negative, digits) = match token.first()? {
        b'-' => (true, &token[1..]),
        _ => (false, token),
    };
    if digits.is_empty() || digits.len() > 19 {
        return std::str::from_utf8(token).ok()?.parse().ok();
    }
    let mut v: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add((d - b'0') as i64)?;
    }
    Some(if negative { -v } else { v })
}

fn cmp_int_float(a: i64, b: f64) -> Option<Ordering> {
    if b.is_nan() {
        return None;
    }
    if (a as f64) != b {
        return (a as f64).partial_cmp(&b);
    }
    // Equal as floats: decide exactly through the integer part of `b`.
    if b >= 9_223_372_036_854_775_808.0 {
        return Some(Ordering::Less);
    }
    if b < -9_223_372_036_854_775_808.0 {
        return Some(Ordering::Greater);
    }
    let bi = b as i64;
    Some(a.cmp(&bi).then(if b.fract() > 0.0 { Ordering::Less } else { Ordering::Equal }))
}

/// How an integer key was written: `7`, `7.0` or `true` are one key to Python, but
/// each is written back as it was.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Spelling {
    #[default]
    Plain,
    Float,
    Bool,
}

impl Spelling {
    /// The spelling of a number that becomes a key.
    pub(crate) fn of_num(n: Num) -> Spelling {
        match n {
            Num::Float(_) => Spelling::Float,
            Num::Int(_) => Spelling::Plain,
        }
    }
}

/// A hashable trace scalar (a `pid`, `tid` or `ts`) under Python's equality.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Key {
    /// A missing key or JSON `null` (`event.get("tid")` is `None` for both).
    None,
    Int(i64),
    /// A float with a fractional part, by its bits.
    Float(u64),
    /// A string, by its id in a [`Strings`] table.
    Str(u32),
    /// A value that Python could not use as a key here (a NaN, an object, a list);
    /// each one is distinct, so it never matches anything.
    Unique(u32),
}

impl Default for Key {
    fn default() -> Self {
        Key::Int(0)
    }
}

impl Key {
    pub(crate) fn from_num(n: Num) -> Option<Key> {
        match n {
            Num::Int(i) => Some(Key::Int(i)),
            Num::Float(f) if f.is_nan() => None,
            // `f as i64` truncates without a call into libm (as `fract` makes one)
            Num::Float(f) if f.abs() < 9.2e18 && (f as i64) as f64 == f => Some(Key::Int(f as i64)),
            Num::Float(f) => Some(Key::Float(f.to_bits())),
        }
    }

    pub(crate) fn as_int(self) -> Option<i64> {
        match self {
            Key::Int(i) => Some(i),
            _ => None,
        }
    }
}

/// Interned strings, so keys and names stay small and cheap to compare.
#[derive(Default, Debug)]
pub(crate) struct Strings {
    ids: HashMap<Box<str>, u32>,
    texts: Vec<Box<str>>,
}

impl Strings {
    pub(crate) fn intern(&mut self, text: &str) -> u32 {
        if let Some(&id) = self.ids.get(text) {
            return id;
        }
        let id = self.texts.len() as u32;
        self.texts.push(text.into());
        self.ids.insert(text.into(), id);
        id
    }

    pub(crate) fn get(&self, id: u32) -> &str {
        &self.texts[id as usize]
    }

    pub(crate) fn len(&self) -> usize {
        self.texts.len()
    }
}

/// The keys of a trace with their text forms, numbered so that events can hold a
/// `u32` for each, and a counter for unique keys.
#[derive(Default, Debug)]
pub(crate) struct Keys {
    pub(crate) strings: Strings,
    next_unique: u32,
    ids: HashMap<Key, u32>,
    by_id: Vec<Key>,
    /// The ids of small integer keys (`NO_ID` where there is none yet): the tids and
    /// pids of most events, found without hashing.
    small: Vec<KeyId>,
}

const SMALL_KEYS: usize = 1024;
const NO_ID: KeyId = KeyId::MAX;

/// A [`Key`] by its number in a [`Keys`] table: equal keys have equal ids.
pub(crate) type KeyId = u32;

impl Keys {
    #[inline]
    pub(crate) fn id(&mut self, key: Key) -> KeyId {
        let small = match key {
            Key::Int(i) if (0..SMALL_KEYS as i64).contains(&i) => Some(i as usize),
            _ => None,
        };
        if let Some(&id) = small.and_then(|i| self.small.get(i)).filter(|&&id| id != NO_ID) {
            return id;
        }
        let id = match self.ids.get(&key) {
            Some(&id) => id,
            None => {
                let id = self.by_id.len() as KeyId;
                self.by_id.push(key);
                self.ids.insert(key, id);
                id
            }
        };
        if let Some(i) = small {
            if self.small.is_empty() {
                self.small = vec![NO_ID; SMALL_KEYS];
            }
            self.small[i] = id;
        }
        id
    }

    /// The id here of key `id` of another table.
    pub(crate) fn import(&mut self, other: &Keys, id: KeyId) -> KeyId {
        let key = match other.key(id) {
            Key::Str(s) => self.string(other.strings.get(s)),
            Key::Unique(_) => self.unique(),
            key => key,
        };
        self.id(key)
    }

    pub(crate) fn key(&self, id: KeyId) -> Key {
        self.by_id[id as usize]
    }

    /// The id of `key` if some event has it.
    pub(crate) fn find(&self, key: Key) -> Option<KeyId> {
        self.ids.get(&key).copied()
    }

    pub(crate) fn count(&self) -> usize {
        self.by_id.len()
    }

    pub(crate) fn unique(&mut self) -> Key {
        self.next_unique += 1;
        Key::Unique(self.next_unique)
    }

    pub(crate) fn string(&mut self, text: &str) -> Key {
        Key::Str(self.strings.intern(text))
    }

    pub(crate) fn num(&mut self, n: Num) -> Key {
        Key::from_num(n).unwrap_or_else(|| self.unique())
    }

    /// `str(key)` as Python prints it (for `f"stream {tid}"`).
    pub(crate) fn py_str(&self, key: Key) -> String {
        match key {
            Key::None => "None".into(),
            Key::Int(i) => i.to_string(),
            Key::Float(bits) => py_float_repr(f64::from_bits(bits)),
            Key::Str(id) => self.strings.get(id).to_string(),
            Key::Unique(_) => "nan".into(),
        }
    }

    /// `str(key)` of the key spelled as `spelling`.
    pub(crate) fn py_str_spelled(&self, key: Key, spelling: Spelling) -> String {
        match (key, spelling) {
            (Key::Int(i), Spelling::Float) => py_float_repr(i as f64),
            (Key::Int(i), Spelling::Bool) => if i != 0 { "True" } else { "False" }.into(),
            _ => self.py_str(key),
        }
    }

    /// The key spelled as `spelling`, as JSON text.
    pub(crate) fn to_json_spelled(&self, key: Key, spelling: Spelling) -> String {
        match (key, spelling) {
            (Key::Int(i), Spelling::Float) => py_float_repr(i as f64),
            (Key::Int(i), Spelling::Bool) => if i != 0 { "true" } else { "false" }.into(),
            _ => self.to_json(key),
        }
    }

    /// The key as JSON text.
    pub(crate) fn to_json(&self, key: Key) -> String {
        match key {
            Key::None => "null".into(),
            Key::Int(i) => i.to_string(),
            Key::Float(bits) => Num::Float(f64::from_bits(bits)).to_json(),
            Key::Str(id) => crate::json::quote(self.strings.get(id)),
            Key::Unique(_) => "NaN".into(),
        }
    }

    /// An order for sorting lanes: numbers by value, then strings, then the rest.
    pub(crate) fn sort_cmp(&self, a: Key, b: Key) -> Ordering {
        fn rank(k: Key) -> u8 {
            match k {
                Key::Int(_) | Key::Float(_) => 0,
                Key::Str(_) => 1,
                Key::None => 2,
                Key::Unique(_) => 3,
            }
        }
        let num = |k: Key| match k {
            Key::Int(i) => Some(Num::Int(i)),
            Key::Float(bits) => Some(Num::Float(f64::from_bits(bits))),
            _ => None,
        };
        match (num(a), num(b)) {
            (Some(x), Some(y)) => x.py_cmp(y).unwrap_or(Ordering::Equal),
            _ => match (a, b) {
                (Key::Str(x), Key::Str(y)) => self.strings.get(x).cmp(self.strings.get(y)),
                _ => rank(a).cmp(&rank(b)).then(a.cmp(&b)),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_integer_keys_get_the_ids_of_all_keys() {
        let mut keys = Keys::default();
        let order = [
            Key::Int(7),
            Key::Int(0),
            Key::Int(-1),
            Key::Int(1023),
            Key::Int(1024),
            Key::Float(7f64.to_bits()),
            Key::None,
            Key::Int(7),
            Key::Int(1 << 40),
        ];
        let ids: Vec<KeyId> = order.iter().map(|&k| keys.id(k)).collect();
        assert_eq!(ids, [0, 1, 2, 3, 4, 5, 6, 0, 7]);
        for (&k, &id) in order.iter().zip(&ids) {
            assert_eq!((keys.id(k), keys.find(k), keys.key(id)), (id, Some(id), k));
        }
    }

    #[test]
    fn python_number_semantics() {
        assert_eq!(Num::Int(5).py_add(Num::Float(0.5)), Num::Float(5.5));
        assert_eq!(Num::Int(5).py_add(Num::Int(2)), Num::Int(7));
        assert!(Num::Int(5).lt(Num::Float(5.5)));
        assert!(!Num::Float(5.0).lt(Num::Int(5)));
        assert_eq!(Num::Int(i64::MAX).py_cmp(Num::Float(9_223_372_036_854_775_808.0)), Some(Ordering::Less));
        assert_eq!(Key::from_num(Num::Float(7.0)), Some(Key::Int(7)));
        assert_eq!(Key::from_num(Num::Float(f64::NAN)), None);
        assert_eq!(Num::parse(b"5"), Some(Num::Int(5)));
        assert_eq!(Num::parse(b"5.0"), Some(Num::Float(5.0)));
        assert_eq!(Num::parse(b"1e3"), Some(Num::Float(1000.0)));
        assert_eq!(Num::Float(2.5).to_json(), "2.5");
        for text in [
            "5361804758596.525",
            "5361804758548.770",
            "0.1",
            "-2.75",
            "123456789012.345",
            "1.000000000000001",
            "0.30000000000000004",
            "9007199254.740993",
            "9007199254.740992",
            "0.000000000000000001",
        ] {
            assert_eq!(Num::parse(text.as_bytes()), Some(Num::Float(text.parse().unwrap())), "{text}");
        }
    }
}
