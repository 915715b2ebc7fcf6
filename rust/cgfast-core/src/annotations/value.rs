//! Annotation values and the text Python's `str()` gives them, so the Rust pipeline
//! writes exactly what the reference writes with `args[key] = str(value)`.

use std::fmt::Write;

use crate::annotations::unicode;

/// A value of an annotation item: what JSON or a plain PyTorch pickle can hold.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// `None` (JSON's `null`).
    None,
    /// A boolean.
    Bool(bool),
    /// An integer within 128 bits.
    Int(i128),
    /// An integer beyond 128 bits, as its decimal digits (and sign).
    BigInt(String),
    /// A float.
    Float(f64),
    /// A string.
    Str(String),
    /// Bytes (from a pickle).
    Bytes(Vec<u8>),
    /// A list.
    List(Vec<Value>),
    /// A tuple (from a pickle).
    Tuple(Vec<Value>),
    /// A dict, its entries in order.
    Dict(Vec<(Value, Value)>),
}

impl Value {
    /// `str(value)` as Python prints it.
    pub fn py_str(&self) -> String {
        match self {
            Value::Str(s) => s.clone(),
            other => {
                let mut out = String::new();
                other.write_repr(&mut out);
                out
            }
        }
    }

    /// `int(value)` as Python computes it, where that is defined for the value.
    pub fn py_int(&self) -> Option<i128> {
        match self {
            Value::Bool(b) => Some(*b as i128),
            Value::Int(i) => Some(*i),
            Value::Float(f) if f.is_finite() => Some(f.trunc() as i128),
            Value::Str(s) => parse_py_int(s),
            _ => None,
        }
    }

    /// The string, if the value is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    fn write_repr(&self, out: &mut String) {
        match self {
            Value::None => out.push_str("None"),
            Value::Bool(true) => out.push_str("True"),
            Value::Bool(false) => out.push_str("False"),
            Value::Int(i) => {
                let _ = write!(out, "{i}");
            }
            Value::BigInt(digits) => out.push_str(digits),
            Value::Float(f) => out.push_str(&py_float_repr(*f)),
            Value::Str(s) => write_str_repr(s, out),
            Value::Bytes(b) => write_bytes_repr(b, out),
            Value::List(items) => write_seq(items, "[", "]", out),
            Value::Tuple(items) if items.len() == 1 => {
                out.push('(');
                items[0].write_repr(out);
                out.push_str(",)");
            }
            Value::Tuple(items) => write_seq(items, "(", ")", out),
            Value::Dict(entries) => {
                out.push('{');
                for (i, (k, v)) in entries.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    k.write_repr(out);
                    out.push_str(": ");
                    v.write_repr(out);
                }
                out.push('}');
            }
        }
    }
}

fn write_seq(items: &[Value], open: &str, close: &str, out: &mut String) {
    out.push_str(open);
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        item.write_repr(out);
    }
    out.push_str(close);
}

/// Python's `int(text)` for decimal strings: surrounding white space, a sign, any
/// Unicode decimal digits and single underscores between digits.
fn parse_py_int(text: &str) -> Option<i128> {
    let t = text.trim_matches(unicode::is_space);
    let (negative, digits) = match t.chars().next()? {
        '-' => (true, &t[1..]),
        '+' => (false, &t[1..]),
        _ => (false, t),
    };
    if digits.is_empty() || digits.starts_with('_') || digits.ends_with('_') || digits.contains("__") {
        return None;
    }
    let mut value: i128 = 0;
    for c in digits.chars() {
        if c == '_' {
            continue;
        }
        let d = unicode::decimal_value(c)? as i128;
        value = value.checked_mul(10)?.checked_add(d)?;
    }
    Some(if negative { -value } else { value })
}

/// `repr(float)`: the shortest digits that round-trip, in Python's layout
/// (`1e+16`, `1e-05`, `0.0001`, `1.0`, `inf`, `nan`).
pub(crate) fn py_float_repr(f: f64) -> String {
    if f.is_nan() {
        return "nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf".into() } else { "-inf".into() };
    }
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').expect("LowerExp always has an exponent");
    let exp: i32 = exp.parse().expect("LowerExp exponent is an integer");
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let decpt = exp + 1;
    let mut out = String::from(sign);
    if -4 < decpt && decpt <= 16 {
        if decpt <= 0 {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', (-decpt) as usize));
            out.push_str(&digits);
        } else if decpt as usize >= digits.len() {
            out.push_str(&digits);
            out.extend(std::iter::repeat_n('0', decpt as usize - digits.len()));
            out.push_str(".0");
        } else {
            out.push_str(&digits[..decpt as usize]);
            out.push('.');
            out.push_str(&digits[decpt as usize..]);
        }
    } else {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let e = decpt - 1;
        let _ = write!(out, "e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs());
    }
    out
}

fn write_str_repr(s: &str, out: &mut String) {
    let quote = if s.contains('\'') && !s.contains('"') { '"' } else { '\'' };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if (c as u32) >= 0x80 && !unicode::is_printable(c) => {
                let code = c as u32;
                if code <= 0xff {
                    let _ = write!(out, "\\x{code:02x}");
                } else if code <= 0xffff {
                    let _ = write!(out, "\\u{code:04x}");
                } else {
                    let _ = write!(out, "\\U{code:08x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

fn write_bytes_repr(b: &[u8], out: &mut String) {
    let quote = if b.contains(&b'\'') && !b.contains(&b'"') { '"' } else { '\'' };
    out.push('b');
    out.push(quote);
    for &byte in b {
        match byte {
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            c if c as char == quote => {
                out.push('\\');
                out.push(quote);
            }
            0x20..=0x7e => out.push(byte as char),
            _ => {
                let _ = write!(out, "\\x{byte:02x}");
            }
        }
    }
    out.push(quote);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_repr_matches_python() {
        let cases = [
            (1.0, "1.0"),
            (0.5, "0.5"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (1.5e16, "1.5e+16"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.234e-7, "1.234e-07"),
            (-2.5, "-2.5"),
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (5361804758596.525, "5361804758596.525"),
            (123456789012345680.0, "1.2345678901234568e+17"),
            (1e300, "1e+300"),
            (f64::INFINITY, "inf"),
        ];
        for (f, want) in cases {
            assert_eq!(py_float_repr(f), want, "{f:?}");
        }
    }

    #[test]
    fn str_of_values_matches_python() {
        assert_eq!(Value::Int(60).py_str(), "60");
        assert_eq!(Value::Bool(true).py_str(), "True");
        assert_eq!(Value::None.py_str(), "None");
        assert_eq!(Value::Str("it's".into()).py_str(), "it's");
        let list = Value::List(vec![Value::Str("a".into()), Value::Int(1), Value::Float(2.0)]);
        assert_eq!(list.py_str(), "['a', 1, 2.0]");
        let dict = Value::Dict(vec![(Value::Str("k".into()), Value::Str("it's".into()))]);
        assert_eq!(dict.py_str(), "{'k': \"it's\"}");
        assert_eq!(Value::Tuple(vec![Value::Int(1)]).py_str(), "(1,)");
        assert_eq!(Value::Bytes(b"a\x00".to_vec()).py_str(), "b'a\\x00'");
        assert_eq!(
            Value::List(vec![Value::Str("\u{600}\u{378}\u{e0001}é".into())]).py_str(),
            "['\\u0600\\u0378\\U000e0001é']"
        );
        assert_eq!(Value::BigInt("1".repeat(45)).py_str(), "1".repeat(45));
    }

    #[test]
    fn int_of_values_matches_python() {
        assert_eq!(Value::Str(" 61 ".into()).py_int(), Some(61));
        assert_eq!(Value::Str("1_000".into()).py_int(), Some(1000));
        assert_eq!(Value::Str("6.0".into()).py_int(), None);
        assert_eq!(Value::Float(-60.7).py_int(), Some(-60));
        assert_eq!(Value::Bool(true).py_int(), Some(1));
        assert_eq!(Value::None.py_int(), None);
        assert_eq!(Value::Str("\u{663}".into()).py_int(), Some(3));
        assert_eq!(Value::Str("\u{ff16}\u{ff11}".into()).py_int(), Some(61));
        assert_eq!(Value::Str("61\u{2028}".into()).py_int(), Some(61));
        assert_eq!(Value::Str("61\u{1f}".into()).py_int(), None);
    }
}
