//! A pickle reader that executes nothing: it understands the opcodes that encode
//! dicts, lists, tuples, strings, bytes and numbers (and `collections.defaultdict` /
//! `OrderedDict` of those, which PyTorch writes), and refuses everything else.

use std::collections::HashMap;

use crate::annotations::value::Value;
use crate::Error;

/// An unpickled value, or why the pickle was refused (the caller names the file).
type Unpickled<T> = Result<T, Error>;

fn refused(message: String) -> Error {
    Error::annotations(None, message)
}

#[derive(Clone, Debug)]
enum Obj {
    Value(Value),
    List(Vec<usize>),
    Tuple(Vec<usize>),
    Dict(Vec<(usize, usize)>),
    Global(String, String),
    Mark,
}

const MAX_OBJECTS: usize = 50_000_000;

struct Machine<'a> {
    data: &'a [u8],
    pos: usize,
    arena: Vec<Obj>,
    stack: Vec<usize>,
    marks: Vec<usize>,
    memo: HashMap<u64, usize>,
}

/// A little-endian two's-complement integer of any length, in decimal.
fn big_int(bytes: &[u8]) -> Value {
    let negative = bytes.last().is_some_and(|&b| b & 0x80 != 0);
    // Magnitude, little-endian base 256.
    let mut magnitude: Vec<u8> = if negative {
        let mut carry = 1u16;
        bytes
            .iter()
            .map(|&b| {
                let v = (!b) as u16 + carry;
                carry = v >> 8;
                v as u8
            })
            .collect()
    } else {
        bytes.to_vec()
    };
    let mut digits = Vec::new();
    while magnitude.iter().any(|&b| b != 0) {
        let mut remainder = 0u32;
        for b in magnitude.iter_mut().rev() {
            let v = (remainder << 8) | *b as u32;
            *b = (v / 10) as u8;
            remainder = v % 10;
        }
        digits.push(b'0' + remainder as u8);
    }
    if digits.is_empty() {
        digits.push(b'0');
    }
    if negative {
        digits.push(b'-');
    }
    digits.reverse();
    Value::BigInt(String::from_utf8(digits).expect("ASCII digits"))
}

/// The value a pickle holds, read without executing anything: only plain dicts, lists,
/// tuples, strings, bytes and numbers (and `collections.defaultdict`) are accepted.
pub(crate) fn load(data: &[u8]) -> Unpickled<Value> {
    let mut m = Machine {
        data,
        pos: 0,
        arena: Vec::new(),
        stack: Vec::new(),
        marks: Vec::new(),
        memo: HashMap::new(),
    };
    let top = m.run()?;
    m.materialize(top, 0)
}

impl<'a> Machine<'a> {
    fn err<T>(&self, what: impl std::fmt::Display) -> Unpickled<T> {
        Err(refused(format!("pickle byte {}: {what}", self.pos)))
    }

    fn take(&mut self, n: usize) -> Unpickled<&'a [u8]> {
        if self.data.len() - self.pos < n {
            return self.err("truncated pickle");
        }
        let s = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn byte(&mut self) -> Unpickled<u8> {
        Ok(self.take(1)?[0])
    }

    fn uint(&mut self, n: usize) -> Unpickled<u64> {
        let b = self.take(n)?;
        Ok(b.iter().rev().fold(0u64, |acc, &x| (acc << 8) | x as u64))
    }

    fn line(&mut self) -> Unpickled<&'a str> {
        let rest = &self.data[self.pos..];
        let Some(end) = rest.iter().position(|&b| b == b'\n') else {
            return self.err("truncated pickle");
        };
        self.pos += end + 1;
        std::str::from_utf8(&rest[..end]).or_else(|_| self.err("a text line that is not UTF-8"))
    }

    fn push(&mut self, obj: Obj) -> Unpickled<()> {
        if self.arena.len() >= MAX_OBJECTS {
            return self.err("too many objects");
        }
        self.arena.push(obj);
        self.stack.push(self.arena.len() - 1);
        Ok(())
    }

    fn pop(&mut self) -> Unpickled<usize> {
        match self.stack.pop() {
            Some(i) if !matches!(self.arena[i], Obj::Mark) => Ok(i),
            _ => self.err("stack underflow"),
        }
    }

    fn pop_mark(&mut self) -> Unpickled<Vec<usize>> {
        let Some(mark) = self.marks.pop() else {
            return self.err("no mark on the stack");
        };
        let items = self.stack.split_off(mark + 1);
        self.stack.pop();
        Ok(items)
    }

    fn top_mut(&mut self) -> Unpickled<usize> {
        match self.stack.last() {
            Some(&i) => Ok(i),
            None => self.err("stack underflow"),
        }
    }

    fn extend_list(&mut self, target: usize, items: Vec<usize>) -> Unpickled<()> {
        match &mut self.arena[target] {
            Obj::List(list) => {
                list.extend(items);
                Ok(())
            }
            _ => self.err("APPEND to something that is not a list"),
        }
    }

    fn set_items(&mut self, target: usize, items: Vec<usize>) -> Unpickled<()> {
        if items.len() % 2 != 0 {
            return self.err("odd number of dict items");
        }
        match &mut self.arena[target] {
            Obj::Dict(entries) => {
                entries.extend(items.chunks(2).map(|kv| (kv[0], kv[1])));
                Ok(())
            }
            _ => self.err("SETITEM on something that is not a dict"),
        }
    }

    fn value(&mut self, v: Value) -> Unpickled<()> {
        self.push(Obj::Value(v))
    }

    fn text(&mut self, n: usize) -> Unpickled<()> {
        let b = self.take(n)?;
        match std::str::from_utf8(b) {
            Ok(s) => self.value(Value::Str(s.to_string())),
            Err(_) => self.err("a string that is not UTF-8"),
        }
    }

    fn memo_get(&mut self, key: u64) -> Unpickled<()> {
        match self.memo.get(&key) {
            Some(&i) => {
                self.stack.push(i);
                Ok(())
            }
            None => self.err(format!("memo key {key} is not defined")),
        }
    }

    fn memo_put(&mut self, key: u64) -> Unpickled<()> {
        let top = self.top_mut()?;
        self.memo.insert(key, top);
        Ok(())
    }

    fn global(&mut self, module: String, name: String) -> Unpickled<()> {
        let allowed = matches!(
            (module.as_str(), name.as_str()),
            ("collections", "defaultdict" | "OrderedDict")
                | ("builtins" | "__builtin__", "list" | "dict" | "tuple" | "str" | "int" | "float")
        );
        if !allowed {
            return self.err(format!("refusing to load global {module}.{name}: only plain dicts, lists, strings and numbers are accepted"));
        }
        self.push(Obj::Global(module, name))
    }

    fn reduce(&mut self) -> Unpickled<()> {
        let args = self.pop()?;
        let callable = self.pop()?;
        let name = match &self.arena[callable] {
            Obj::Global(_, name) => name.clone(),
            _ => return self.err("REDUCE of something that is not a known global"),
        };
        let arg_items = match &self.arena[args] {
            Obj::Tuple(items) => items.clone(),
            _ => return self.err("REDUCE arguments are not a tuple"),
        };
        let factory_ok = |m: &Self| {
            arg_items.iter().all(|&a| matches!(&m.arena[a], Obj::Global(..) | Obj::Value(Value::None)))
        };
        match name.as_str() {
            "defaultdict" if arg_items.len() <= 1 && factory_ok(self) => self.push(Obj::Dict(Vec::new())),
            "OrderedDict" if arg_items.is_empty() => self.push(Obj::Dict(Vec::new())),
            _ => self.err(format!(
                "refusing to call {name}: only defaultdict(list) and OrderedDict() are accepted"
            )),
        }
    }

    fn run(&mut self) -> Unpickled<usize> {
        loop {
            let op = self.byte()?;
            match op {
                0x80 => {
                    let proto = self.byte()?;
                    if proto > 5 {
                        return self.err(format!("unsupported pickle protocol {proto}"));
                    }
                }
                0x95 => {
                    self.take(8)?;
                }
                b'.' => return self.pop(),
                b'(' => {
                    self.marks.push(self.stack.len());
                    self.arena.push(Obj::Mark);
                    self.stack.push(self.arena.len() - 1);
                }
                b'}' => self.push(Obj::Dict(Vec::new()))?,
                b']' => self.push(Obj::List(Vec::new()))?,
                b')' => self.push(Obj::Tuple(Vec::new()))?,
                b'N' => self.value(Value::None)?,
                0x88 => self.value(Value::Bool(true))?,
                0x89 => self.value(Value::Bool(false))?,
                b'I' => {
                    let line = self.line()?;
                    let v = match line {
                        "01" => Value::Bool(true),
                        "00" => Value::Bool(false),
                        t => Value::Int(t.trim().parse().or_else(|_| self.err("bad INT"))?),
                    };
                    self.value(v)?;
                }
                b'L' => {
                    let line = self.line()?;
                    let v = line.trim_end_matches('L').parse().or_else(|_| self.err("bad LONG"))?;
                    self.value(Value::Int(v))?;
                }
                b'J' => {
                    let v = self.uint(4)? as u32 as i32;
                    self.value(Value::Int(v as i128))?;
                }
                b'K' => {
                    let v = self.uint(1)?;
                    self.value(Value::Int(v as i128))?;
                }
                b'M' => {
                    let v = self.uint(2)?;
                    self.value(Value::Int(v as i128))?;
                }
                0x8a | 0x8b => {
                    let n = if op == 0x8a { self.uint(1)? } else { self.uint(4)? } as usize;
                    let bytes = self.take(n)?;
                    let v = if n <= 15 {
                        let mut v: i128 = 0;
                        for (i, &b) in bytes.iter().enumerate() {
                            v |= (b as i128) << (8 * i);
                        }
                        if n > 0 && bytes[n - 1] & 0x80 != 0 {
                            v -= 1i128 << (8 * n);
                        }
                        Value::Int(v)
                    } else {
                        big_int(bytes)
                    };
                    self.value(v)?;
                }
                b'F' => {
                    let line = self.line()?;
                    let v = line.trim().parse().or_else(|_| self.err("bad FLOAT"))?;
                    self.value(Value::Float(v))?;
                }
                b'G' => {
                    let b = self.take(8)?;
                    let v = f64::from_be_bytes(b.try_into().expect("8 bytes"));
                    self.value(Value::Float(v))?;
                }
                b'X' => {
                    let n = self.uint(4)? as usize;
                    self.text(n)?;
                }
                0x8c => {
                    let n = self.uint(1)? as usize;
                    self.text(n)?;
                }
                0x8d => {
                    let n = self.uint(8)? as usize;
                    self.text(n)?;
                }
                b'V' => {
                    let line = self.line()?.to_string();
                    self.value(Value::Str(line))?;
                }
                b'S' => {
                    let line = self.line()?;
                    let unquoted = line.trim().trim_matches(|c| c == '\'' || c == '"').to_string();
                    self.value(Value::Str(unquoted))?;
                }
                b'T' | b'U' | b'B' | b'C' | 0x8e | 0x96 => {
                    let n = match op {
                        b'U' | b'C' => self.uint(1)?,
                        b'T' | b'B' => self.uint(4)?,
                        _ => self.uint(8)?,
                    } as usize;
                    let bytes = self.take(n)?.to_vec();
                    let v = if matches!(op, b'T' | b'U') {
                        Value::Str(bytes.iter().map(|&b| b as char).collect())
                    } else {
                        Value::Bytes(bytes)
                    };
                    self.value(v)?;
                }
                b't' => {
                    let items = self.pop_mark()?;
                    self.push(Obj::Tuple(items))?;
                }
                0x85..=0x87 => {
                    let n = (op - 0x84) as usize;
                    if self.stack.len() < n {
                        return self.err("stack underflow");
                    }
                    let items = self.stack.split_off(self.stack.len() - n);
                    self.push(Obj::Tuple(items))?;
                }
                b'l' => {
                    let items = self.pop_mark()?;
                    self.push(Obj::List(items))?;
                }
                b'd' => {
                    let items = self.pop_mark()?;
                    self.push(Obj::Dict(Vec::new()))?;
                    let top = self.top_mut()?;
                    self.set_items(top, items)?;
                }
                b'a' => {
                    let item = self.pop()?;
                    let target = self.top_mut()?;
                    self.extend_list(target, vec![item])?;
                }
                b'e' => {
                    let items = self.pop_mark()?;
                    let target = self.top_mut()?;
                    self.extend_list(target, items)?;
                }
                b's' => {
                    let v = self.pop()?;
                    let k = self.pop()?;
                    let target = self.top_mut()?;
                    self.set_items(target, vec![k, v])?;
                }
                b'u' => {
                    let items = self.pop_mark()?;
                    let target = self.top_mut()?;
                    self.set_items(target, items)?;
                }
                0x94 => {
                    let key = self.memo.len() as u64;
                    self.memo_put(key)?;
                }
                b'p' => {
                    let key = self.line()?.trim().parse().or_else(|_| self.err("bad PUT"))?;
                    self.memo_put(key)?;
                }
                b'q' => {
                    let key = self.uint(1)?;
                    self.memo_put(key)?;
                }
                b'r' => {
                    let key = self.uint(4)?;
                    self.memo_put(key)?;
                }
                b'g' => {
                    let key = self.line()?.trim().parse().or_else(|_| self.err("bad GET"))?;
                    self.memo_get(key)?;
                }
                b'h' => {
                    let key = self.uint(1)?;
                    self.memo_get(key)?;
                }
                b'j' => {
                    let key = self.uint(4)?;
                    self.memo_get(key)?;
                }
                b'0' => {
                    self.pop()?;
                }
                b'1' => {
                    self.pop_mark()?;
                }
                b'2' => {
                    let top = self.top_mut()?;
                    self.stack.push(top);
                }
                b'c' => {
                    let module = self.line()?.to_string();
                    let name = self.line()?.to_string();
                    self.global(module, name)?;
                }
                0x93 => {
                    let name = self.pop()?;
                    let module = self.pop()?;
                    match (&self.arena[module], &self.arena[name]) {
                        (Obj::Value(Value::Str(m)), Obj::Value(Value::Str(n))) => {
                            let (m, n) = (m.clone(), n.clone());
                            self.global(m, n)?;
                        }
                        _ => return self.err("STACK_GLOBAL of non-strings"),
                    }
                }
                b'R' => self.reduce()?,
                other => {
                    let what = match other {
                        b'b' => "BUILD (object state)".to_string(),
                        b'i' | b'o' | 0x81 | 0x92 => "object construction".to_string(),
                        b'P' | b'Q' => "persistent ids".to_string(),
                        0x82..=0x84 => "extension registry".to_string(),
                        0x8f..=0x91 => "sets".to_string(),
                        _ => format!("opcode 0x{other:02x}"),
                    };
                    return self.err(format!(
                        "refusing {what}: only plain dicts, lists, strings and numbers are accepted"
                    ));
                }
            }
        }
    }

    fn materialize(&self, i: usize, depth: usize) -> Unpickled<Value> {
        if depth > 200 {
            return Err(refused("pickle is nested too deeply (or refers to itself)".into()));
        }
        let m = |j| self.materialize(j, depth + 1);
        Ok(match &self.arena[i] {
            Obj::Value(v) => v.clone(),
            Obj::List(items) => Value::List(items.iter().map(|&j| m(j)).collect::<Result<_, _>>()?),
            Obj::Tuple(items) => Value::Tuple(items.iter().map(|&j| m(j)).collect::<Result<_, _>>()?),
            Obj::Dict(entries) => {
                // pickle.dumps writes each key of a dict once, so no merging is needed.
                Value::Dict(entries.iter().map(|&(k, v)| Ok((m(k)?, m(v)?))).collect::<Unpickled<_>>()?)
            }
            Obj::Global(module, name) => {
                return Err(refused(format!("pickle holds a reference to {module}.{name}, not data")))
            }
            Obj::Mark => return Err(refused("pickle leaves a mark on the stack".into())),
        })
    }
}
