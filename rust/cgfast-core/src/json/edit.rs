//! Surgical edits of one event's JSON: replace or add top-level and `args` members,
//! keep every other byte as it was.

use crate::json::{str_is, Cursor, Scan, StrSpan};
use crate::read::layout::{Places, Rel};

/// One `key: value` to set; `value` is JSON text, `quoted_key` the key as JSON.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Set<'a> {
    pub(crate) key: &'a str,
    pub(crate) quoted_key: &'a str,
    pub(crate) value: &'a str,
}

/// The members to set on an event, applied in order with dict semantics: a later
/// write of a key wins, keys that are new go last.
#[derive(Default, Debug, Clone)]
pub(crate) struct EventEdits<'a> {
    pub(crate) top: Vec<Set<'a>>,
    pub(crate) args: Vec<Set<'a>>,
}

#[derive(Clone, Copy)]
struct Member {
    key: StrSpan,
    value: (usize, usize),
}

/// Reusable buffers, so that editing allocates nothing per event.
#[derive(Default)]
pub(crate) struct Editor {
    top: Vec<Member>,
    args: Vec<Member>,
}

fn members(c: &mut Cursor<'_>, out: &mut Vec<Member>) -> Scan<usize> {
    out.clear();
    c.object(|c, key| {
        c.peek()?;
        let start = c.pos;
        c.skip_trusted()?;
        let mut end = c.pos;
        while end > start && matches!(c.buf[end - 1], b' ' | b'\n' | b'\r' | b'\t') {
            end -= 1;
        }
        out.push(Member { key, value: (start, end) });
        Ok(())
    })?;
    Ok(c.pos - 1)
}

/// Where each write lands: on an existing member (by index), or appended.
fn plan<'a>(
    event: &[u8],
    existing: &[Member],
    writes: &[Set<'a>],
    replaced: &mut Vec<(usize, &'a str)>,
    appended: &mut Vec<Set<'a>>,
) {
    for w in writes {
        if let Some(i) = existing.iter().rposition(|m| str_is(event, m.key, w.key)) {
            match replaced.iter_mut().find(|(j, _)| *j == i) {
                Some(slot) => slot.1 = w.value,
                None => replaced.push((i, w.value)),
            }
        } else if let Some(slot) = appended.iter_mut().find(|a| a.key == w.key) {
            slot.value = w.value;
        } else {
            appended.push(*w);
        }
    }
}

fn push_members(out: &mut Vec<u8>, members: &[Set<'_>], first: bool) {
    for (i, m) in members.iter().enumerate() {
        if i > 0 || !first {
            out.extend_from_slice(b", ");
        }
        out.extend_from_slice(m.quoted_key.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(m.value.as_bytes());
    }
}

/// Apply `edits` by splicing at `places` (recorded by the scan), without parsing;
/// `false` (nothing written) when the places cannot take them. `args_run` is more
/// members for `args`, rendered (`"k": v, ...`), that go after those `edits.args`
/// appends: the caller keeps their keys out of `edits.args`, and the writes that
/// would follow them in dict order too. Allocates nothing.
pub(crate) fn splice(
    event: &[u8],
    places: &Places,
    edits: &EventEdits<'_>,
    args_run: &str,
    out: &mut Vec<u8>,
) -> bool {
    if !places.exact
        || event.last() != Some(&b'}')
        || ((!edits.args.is_empty() || !args_run.is_empty()) && places.args_close == u16::MAX)
    {
        return false;
    }
    let in_place = |key: &str| match key {
        "tid" => places.tid,
        "ts" => places.ts,
        _ => Rel::NONE,
    };
    let in_args = |key: &str| match key {
        "stream" => places.stream,
        "graph node id" => places.node,
        _ => Rel::NONE,
    };
    if distinct(&edits.top).any(|w| !matches!(w.key, "tid" | "ts")) {
        return false;
    }
    // Values replaced where they are: at most tid, ts, stream and graph node id.
    let mut replaced: [(usize, usize, &str); 4] = [(0, 0, ""); 4];
    let mut n = 0;
    for (list, place) in [(&edits.top, &in_place as &dyn Fn(&str) -> Rel), (&edits.args, &in_args)] {
        for w in distinct(list) {
            let at = place(w.key);
            if at.is_some() {
                if n == replaced.len() {
                    return false;
                }
                replaced[n] = (at.start as usize, (at.start + at.len) as usize, last_value(list, w.key));
                n += 1;
            }
        }
    }
    let replaced = &mut replaced[..n];
    replaced.sort_unstable_by_key(|r| r.0);
    let args_new = !args_run.is_empty() || distinct(&edits.args).any(|w| !in_args(w.key).is_some());
    let append_args = |out: &mut Vec<u8>| {
        let mut first = places.args_empty;
        for w in distinct(&edits.args).filter(|w| !in_args(w.key).is_some()) {
            push_member(out, w.quoted_key, last_value(&edits.args, w.key), first);
            first = false;
        }
        if !args_run.is_empty() {
            if !first {
                out.extend_from_slice(b", ");
            }
            out.extend_from_slice(args_run.as_bytes());
        }
    };
    let args_close = places.args_close as usize;
    let top_close = event.len() - 1;
    let mut at = 0;
    let mut args_done = !args_new;
    for &(s, e, value) in replaced.iter() {
        if !args_done && args_close < s {
            out.extend_from_slice(&event[at..args_close]);
            append_args(out);
            at = args_close;
            args_done = true;
        }
        out.extend_from_slice(&event[at..s]);
        out.extend_from_slice(value.as_bytes());
        at = e;
    }
    if !args_done {
        out.extend_from_slice(&event[at..args_close]);
        append_args(out);
        at = args_close;
    }
    out.extend_from_slice(&event[at..top_close]);
    for w in distinct(&edits.top).filter(|w| !in_place(w.key).is_some()) {
        push_member(out, w.quoted_key, last_value(&edits.top, w.key), false);
    }
    out.extend_from_slice(&event[top_close..]);
    true
}

/// The writes whose key was not written before, in order (dict semantics: the first
/// write of a key fixes its position, the last its value).
fn distinct<'e, 'a>(writes: &'e [Set<'a>]) -> impl Iterator<Item = &'e Set<'a>> {
    writes
        .iter()
        .enumerate()
        .filter(move |(i, w)| !writes[..*i].iter().any(|e| e.key == w.key))
        .map(|(_, w)| w)
}

/// The value the last write of `key` gives it.
fn last_value<'a>(writes: &[Set<'a>], key: &str) -> &'a str {
    writes.iter().rev().find(|w| w.key == key).map_or("", |w| w.value)
}

fn push_member(out: &mut Vec<u8>, quoted_key: &str, value: &str, first: bool) {
    if !first {
        out.extend_from_slice(b", ");
    }
    out.extend_from_slice(quoted_key.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value.as_bytes());
}

impl Editor {
    /// Write `event` (a JSON object) with `edits` applied into `out`; `false` (and
    /// nothing written) if `event` is not an object.
    pub(crate) fn apply(&mut self, event: &[u8], edits: &EventEdits<'_>, out: &mut Vec<u8>) -> bool {
        let mut c = Cursor::new(event, 0);
        let Ok(close) = members(&mut c, &mut self.top) else { return false };
        let mut top_replaced = Vec::new();
        let mut top_appended = Vec::new();
        plan(event, &self.top, &edits.top, &mut top_replaced, &mut top_appended);

        let mut args_replaced = Vec::new();
        let mut args_appended = Vec::new();
        let mut args_object: Option<(usize, bool)> = None;
        let mut new_args: Option<Vec<u8>> = None;
        if !edits.args.is_empty() {
            match self.top.iter().rposition(|m| str_is(event, m.key, "args")).map(|i| self.top[i]) {
                Some(m) if event[m.value.0] == b'{' => {
                    let mut ac = Cursor::new(&event[..m.value.1], m.value.0);
                    let Ok(args_close) = members(&mut ac, &mut self.args) else { return false };
                    plan(event, &self.args, &edits.args, &mut args_replaced, &mut args_appended);
                    args_object = Some((args_close, self.args.is_empty()));
                }
                Some(_) => return false,
                None => {
                    let mut fresh = Vec::new();
                    plan(event, &[], &edits.args, &mut Vec::new(), &mut fresh);
                    let mut text = b"{".to_vec();
                    push_members(&mut text, &fresh, true);
                    text.push(b'}');
                    new_args = Some(text);
                }
            }
        }
        if let Some(text) = &new_args {
            top_appended.push(Set {
                key: "args",
                quoted_key: "\"args\"",
                value: std::str::from_utf8(text).expect("JSON text"),
            });
        }

        // Splices in byte order: (start, end, what).
        enum What<'x> {
            Text(&'x str),
            Append(&'x [Set<'x>], bool),
        }
        let mut splices: Vec<(usize, usize, What<'_>)> = Vec::with_capacity(8);
        for &(i, v) in &top_replaced {
            let (s, e) = self.top[i].value;
            splices.push((s, e, What::Text(v)));
        }
        for &(i, v) in &args_replaced {
            let (s, e) = self.args[i].value;
            splices.push((s, e, What::Text(v)));
        }
        if let Some((args_close, empty)) = args_object {
            if !args_appended.is_empty() {
                splices.push((args_close, args_close, What::Append(&args_appended, empty)));
            }
        }
        if !top_appended.is_empty() {
            splices.push((close, close, What::Append(&top_appended, self.top.is_empty())));
        }
        splices.sort_by_key(|s| (s.0, s.1));
        let mut at = 0;
        for (s, e, what) in splices {
            out.extend_from_slice(&event[at..s]);
            match what {
                What::Text(t) => out.extend_from_slice(t.as_bytes()),
                What::Append(members, first) => push_members(out, members, first),
            }
            at = e;
        }
        out.extend_from_slice(&event[at..]);
        true
    }
}

/// Write `event` without its `args` member `key` (the last, the one a reader sees, as
/// [`Editor::apply`] replaces it) into `out`; `false` (and nothing written) if `event`
/// is not an object or has no such member.
pub(crate) fn drop_arg(event: &[u8], key: &str, out: &mut Vec<u8>) -> bool {
    let mut top = Vec::new();
    let mut c = Cursor::new(event, 0);
    if members(&mut c, &mut top).is_err() {
        return false;
    }
    let Some(m) = top.iter().rposition(|m| str_is(event, m.key, "args")).map(|i| top[i]) else {
        return false;
    };
    if event[m.value.0] != b'{' {
        return false;
    }
    let mut args = Vec::new();
    let mut ac = Cursor::new(&event[..m.value.1], m.value.0);
    if members(&mut ac, &mut args).is_err() {
        return false;
    }
    let Some(i) = args.iter().rposition(|a| str_is(event, a.key, key)) else { return false };
    // the member goes with the separator before it (after it, when it is the first)
    let (start, end) = match (i.checked_sub(1), args.get(i + 1)) {
        (Some(before), _) => (args[before].value.1, args[i].value.1),
        (None, Some(next)) => (args[i].key.start - 1, next.key.start - 1),
        (None, None) => (args[i].key.start - 1, args[i].value.1),
    };
    out.extend_from_slice(&event[..start]);
    out.extend_from_slice(&event[end..]);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quoted(k: &str) -> &'static str {
        Box::leak(crate::json::quote(k).into_boxed_str())
    }

    fn edit(
        event: &str,
        top: &[(&'static str, &'static str)],
        args: &[(&'static str, &'static str)],
    ) -> String {
        let set = |&(k, v): &(&'static str, &'static str)| Set { key: k, quoted_key: quoted(k), value: v };
        let edits = EventEdits { top: top.iter().map(set).collect(), args: args.iter().map(set).collect() };
        let mut out = Vec::new();
        assert!(Editor::default().apply(event.as_bytes(), &edits, &mut out));
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn replaces_in_place_and_appends_new_keys() {
        let e = r#"{"ph": "X", "tid": 7, "ts": 1.5, "args": {"stream": 7, "graph node id": 5}}"#;
        assert_eq!(
            edit(
                e,
                &[("tid", "60"), ("ts", "2.0")],
                &[("name", "\"mlp\""), ("stream", "\"60\""), ("stream", "60")]
            ),
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
    fn splicing_at_recorded_places_equals_parsing() {
        let e = r#"{"ph": "X", "tid": 7, "ts": 1.5, "args": {"stream": 7, "graph node id": 5}}"#;
        let rel = |needle: &str, len: usize| {
            let start = e.find(needle).unwrap() + needle.len();
            Rel { start: start as u16, len: len as u16 }
        };
        let places = Places {
            tid: rel("\"tid\": ", 1),
            ts: rel("\"ts\": ", 3),
            stream: rel("\"stream\": ", 1),
            node: rel("\"graph node id\": ", 1),
            args_close: (e.len() - 2) as u16,
            args_empty: false,
            exact: true,
        };
        let set = |k: &'static str, v: &'static str| Set { key: k, quoted_key: quoted(k), value: v };
        let edits = EventEdits {
            top: vec![set("tid", "60"), set("ts", "2.0")],
            args: vec![set("name", "\"mlp\""), set("stream", "\"60\""), set("stream", "60")],
        };
        let mut spliced = Vec::new();
        assert!(splice(e.as_bytes(), &places, &edits, "", &mut spliced));
        let mut parsed = Vec::new();
        assert!(Editor::default().apply(e.as_bytes(), &edits, &mut parsed));
        assert_eq!(String::from_utf8(spliced).unwrap(), String::from_utf8(parsed).unwrap());
    }

    #[test]
    fn drops_an_args_member_with_its_separator() {
        let dropped = |e: &str| {
            let mut out = Vec::new();
            drop_arg(e.as_bytes(), "cgfast", &mut out).then(|| String::from_utf8(out).unwrap())
        };
        assert_eq!(
            dropped(r#"{"a": 1, "args": {"x": 1, "cgfast": "ambiguous replay", "y": 2}}"#).unwrap(),
            r#"{"a": 1, "args": {"x": 1, "y": 2}}"#
        );
        assert_eq!(
            dropped(r#"{"args": {"x": 1, "cgfast": "unmatched replay"}, "b": 2}"#).unwrap(),
            r#"{"args": {"x": 1}, "b": 2}"#
        );
        assert_eq!(
            dropped(r#"{"args": {"cgfast": "ambiguous replay", "y": 2}}"#).unwrap(),
            r#"{"args": {"y": 2}}"#
        );
        assert_eq!(dropped(r#"{"args": { "cgfast" : 1 }}"#).unwrap(), r#"{"args": {  }}"#);
        assert_eq!(dropped(r#"{"args": {"x": 1}}"#), None);
        assert_eq!(dropped(r#"{"args": 3}"#), None);
    }

    #[test]
    fn keeps_bytes_it_does_not_edit() {
        let e = "{ \"name\" : \"k\\u00e9\" ,\n \"tid\":7 }";
        assert_eq!(edit(e, &[("tid", "9")], &[]), "{ \"name\" : \"k\\u00e9\" ,\n \"tid\":9 }");
    }
}
