//! Small JSON documents (annotation files) as [`Value`]s, read and written the way
//! Python's `json` module does (`NaN` and `Infinity` included).

use std::collections::HashMap;

use crate::annotations::value::{py_float_repr, Value};
use crate::index::keys::Num;
use crate::json::{push_quoted, Cursor, Scalar, Scan, ScanError};

const MAX_DEPTH: usize = 512;

/// Parse a whole document; trailing bytes other than white space are an error.
pub(crate) fn parse(bytes: &[u8]) -> Result<Value, (usize, &'static str)> {
    let mut cursor = Cursor::new(bytes, 0);
    let value = value(&mut cursor, 0).map_err(|e| describe(e, bytes.len()))?;
    match cursor.peek() {
        Err(ScanError::Incomplete) => Ok(value),
        _ => Err((cursor.pos, "end of input")),
    }
}

fn describe(e: ScanError, len: usize) -> (usize, &'static str) {
    match e {
        ScanError::Incomplete => (len, "more input (the document is truncated)"),
        ScanError::Syntax { at, expected } => (at, expected),
    }
}

fn value(c: &mut Cursor<'_>, depth: usize) -> Scan<Value> {
    if depth > MAX_DEPTH {
        return Err(ScanError::Syntax { at: c.pos, expected: "less nesting" });
    }
    match c.peek()? {
        b'{' => {
            let mut entries: Vec<(Value, Value)> = Vec::new();
            let mut positions: HashMap<String, usize> = HashMap::new();
            c.object(|c, key| {
                let key = c.text(key).into_owned();
                let v = value(c, depth + 1)?;
                match positions.get(&key) {
                    Some(&at) => entries[at].1 = v,
                    None => {
                        positions.insert(key.clone(), entries.len());
                        entries.push((Value::Str(key), v));
                    }
                }
                Ok(())
            })?;
            Ok(Value::Dict(entries))
        }
        b'[' => {
            c.pos += 1;
            let mut items = Vec::new();
            if c.peek()? == b']' {
                c.pos += 1;
                return Ok(Value::List(items));
            }
            loop {
                items.push(value(c, depth + 1)?);
                match c.peek()? {
                    b',' => c.pos += 1,
                    b']' => {
                        c.pos += 1;
                        return Ok(Value::List(items));
                    }
                    _ => return Err(ScanError::Syntax { at: c.pos, expected: "',' or ']'" }),
                }
            }
        }
        _ => Ok(match c.scalar()? {
            Scalar::Null => Value::None,
            Scalar::Bool(b) => Value::Bool(b),
            Scalar::Str(s) => Value::Str(c.text(s).into_owned()),
            Scalar::Number { start, end } => number(&c.buf[start..end]),
            Scalar::Container { .. } => unreachable!("containers are handled above"),
        }),
    }
}

fn number(token: &[u8]) -> Value {
    match Num::parse(token) {
        Some(Num::Int(i)) => Value::Int(i as i128),
        Some(Num::Float(f)) => Value::Float(f),
        None => {
            let text = std::str::from_utf8(token).unwrap_or("0");
            match text.parse::<i128>() {
                Ok(i) => Value::Int(i),
                Err(_) if !text.contains(['.', 'e', 'E']) => Value::BigInt(text.to_string()),
                Err(_) => Value::Float(text.parse().unwrap_or(f64::NAN)),
            }
        }
    }
}

/// Append `value` as compact JSON.
pub(crate) fn write(value: &Value, out: &mut String) {
    match value {
        Value::None => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Int(i) => out.push_str(&i.to_string()),
        Value::BigInt(digits) => out.push_str(digits),
        Value::Float(f) if f.is_nan() => out.push_str("NaN"),
        Value::Float(f) if f.is_infinite() => out.push_str(if *f > 0.0 { "Infinity" } else { "-Infinity" }),
        Value::Float(f) => out.push_str(&py_float_repr(*f)),
        Value::Str(s) => push_quoted(out, s),
        Value::Bytes(b) => push_quoted(out, &String::from_utf8_lossy(b)),
        Value::List(items) | Value::Tuple(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write(item, out);
            }
            out.push(']');
        }
        Value::Dict(entries) => {
            out.push('{');
            for (i, (k, v)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                match k {
                    Value::Str(s) => push_quoted(out, s),
                    other => push_quoted(out, &other.py_str()),
                }
                out.push_str(": ");
                write(v, out);
            }
            out.push('}');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let text = r#"{"a": [1, 2.5, "x\ny", null, true], "b": {"c": NaN}}"#;
        let v = parse(text.as_bytes()).unwrap();
        let mut out = String::new();
        write(&v, &mut out);
        assert_eq!(out, text);
    }

    #[test]
    fn last_duplicate_key_wins_in_first_position() {
        let v = parse(br#"{"a": 1, "b": 2, "a": 3}"#).unwrap();
        assert_eq!(
            v,
            Value::Dict(vec![
                (Value::Str("a".into()), Value::Int(3)),
                (Value::Str("b".into()), Value::Int(2))
            ])
        );
    }

    #[test]
    fn reports_where_it_broke() {
        assert_eq!(parse(b"{\"a\": }").unwrap_err().0, 6);
        assert_eq!(parse(b"[1, 2").unwrap_err().0, 5);
        assert!(parse(b"{} x").is_err());
        assert!(parse("[".repeat(10_000).as_bytes()).is_err());
    }
}
