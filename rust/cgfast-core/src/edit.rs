//! Surgical edits of one event's JSON: replace or add top-level and `args` members,
//! keep every other byte as it was.

use crate::json::{text_of, Cursor, Scan};

/// The members to set on an event; values are JSON text.
#[derive(Default, Debug, Clone)]
pub struct EventEdits {
    pub top: Vec<(&'static str, String)>,
    pub args: Vec<(String, String)>,
}

struct Member {
    key: String,
    value: (usize, usize),
}

fn members(c: &mut Cursor<'_>) -> Scan<(Vec<Member>, usize)> {
    let mut out = Vec::new();
    c.object(|c, key| {
        let key = text_of(c.buf, key).into_owned();
        c.peek()?;
        let start = c.pos;
        c.skip_value()?;
        out.push(Member { key, value: (start, c.pos) });
        Ok(())
    })?;
    Ok((out, c.pos - 1))
}

/// Apply `edits` (in order, dict semantics: the last write of a key wins, new keys go
/// last) to `event`, a JSON object. `None` if `event` is not an object.
pub fn apply(event: &[u8], edits: &EventEdits) -> Option<Vec<u8>> {
    let mut c = Cursor::new(event, 0);
    let (top, close) = members(&mut c).ok()?;
    let mut replace: Vec<((usize, usize), String)> = Vec::new();
    let mut append_top: Vec<(String, String)> = Vec::new();
    plan(&top, edits.top.iter().map(|(k, v)| (k.to_string(), v.clone())), &mut replace, &mut append_top);

    let mut append_args: Vec<(String, String)> = Vec::new();
    let mut args_close = None;
    if !edits.args.is_empty() {
        match top.iter().rev().find(|m| m.key == "args") {
            Some(m) if event[m.value.0] == b'{' => {
                let mut ac = Cursor::new(&event[..m.value.1], m.value.0);
                let (args, close) = members(&mut ac).ok()?;
                plan(&args, edits.args.iter().cloned(), &mut replace, &mut append_args);
                args_close = Some((close, args.is_empty()));
            }
            _ => {
                let body: Vec<String> = edits.args.iter().map(|(k, v)| format!("{}: {v}", crate::json::quote(k))).collect();
                let object = format!("{{{}}}", body.join(", "));
                match top.iter().rev().find(|m| m.key == "args") {
                    Some(m) => replace.push((m.value, object)),
                    None => append_top.push(("args".into(), object)),
                }
            }
        }
    }

    let mut inserts: Vec<(usize, String)> = Vec::new();
    if let Some((close, empty)) = args_close {
        if !append_args.is_empty() {
            inserts.push((close, joined(&append_args, empty)));
        }
    }
    if !append_top.is_empty() {
        inserts.push((close, joined(&append_top, top.is_empty())));
    }

    let mut pieces: Vec<(usize, usize, String)> = replace.into_iter().map(|((s, e), v)| (s, e, v)).collect();
    pieces.extend(inserts.into_iter().map(|(at, text)| (at, at, text)));
    pieces.sort_by_key(|p| (p.0, p.1));
    let mut out = Vec::with_capacity(event.len() + 128);
    let mut at = 0;
    for (s, e, text) in pieces {
        out.extend_from_slice(&event[at..s]);
        out.extend_from_slice(text.as_bytes());
        at = e;
    }
    out.extend_from_slice(&event[at..]);
    Some(out)
}

fn joined(members: &[(String, String)], first: bool) -> String {
    let mut s = String::new();
    for (i, (k, v)) in members.iter().enumerate() {
        if i > 0 || !first {
            s.push_str(", ");
        }
        s.push_str(&crate::json::quote(k));
        s.push_str(": ");
        s.push_str(v);
    }
    s
}

/// Sort `writes` into replacements of existing members and new members.
fn plan(
    existing: &[Member],
    writes: impl Iterator<Item = (String, String)>,
    replace: &mut Vec<((usize, usize), String)>,
    append: &mut Vec<(String, String)>,
) {
    let mut replaced: Vec<(usize, String)> = Vec::new();
    for (key, value) in writes {
        if let Some(i) = existing.iter().rposition(|m| m.key == key) {
            match replaced.iter_mut().find(|(j, _)| *j == i) {
                Some(slot) => slot.1 = value,
                None => replaced.push((i, value)),
            }
        } else if let Some(slot) = append.iter_mut().find(|(k, _)| *k == key) {
            slot.1 = value;
        } else {
            append.push((key, value));
        }
    }
    replace.extend(replaced.into_iter().map(|(i, v)| (existing[i].value, v)));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edit(event: &str, top: &[(&'static str, &str)], args: &[(&str, &str)]) -> String {
        let edits = EventEdits {
            top: top.iter().map(|(k, v)| (*k, v.to_string())).collect(),
            args: args.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        };
        String::from_utf8(apply(event.as_bytes(), &edits).unwrap()).unwrap()
    }

    #[test]
    fn replaces_in_place_and_appends_new_keys() {
        let e = r#"{"ph": "X", "tid": 7, "ts": 1.5, "args": {"stream": 7, "graph node id": 5}}"#;
        assert_eq!(
            edit(e, &[("tid", "60"), ("ts", "2.0")], &[("name", "\"mlp\""), ("stream", "\"60\""), ("stream", "60")]),
            r#"{"ph": "X", "tid": 60, "ts": 2.0, "args": {"stream": 60, "graph node id": 5, "name": "mlp"}}"#
        );
    }

    #[test]
    fn adds_missing_members_and_args() {
        assert_eq!(edit(r#"{"ph":"f"}"#, &[("tid", "8")], &[]), r#"{"ph":"f", "tid": 8}"#);
        assert_eq!(edit("{}", &[("tid", "8")], &[]), r#"{"tid": 8}"#);
        assert_eq!(edit(r#"{"args": {}}"#, &[], &[("a", "1")]), r#"{"args": {"a": 1}}"#);
        assert_eq!(edit(r#"{"x": 1}"#, &[], &[("a", "1")]), r#"{"x": 1, "args": {"a": 1}}"#);
    }

    #[test]
    fn keeps_bytes_it_does_not_edit() {
        let e = "{ \"name\" : \"k\\u00e9\" ,\n \"tid\":7 }";
        assert_eq!(edit(e, &[("tid", "9")], &[]), "{ \"name\" : \"k\\u00e9\" ,\n \"tid\":9 }");
    }
}
