//! An annotation's `args` writes as JSON text, prepared once per node for the rewrite.

use crate::json::edit::Set;
use crate::json::quote;
use crate::read::layout::Places;

/// The `args` keys a splice replaces where they stand (see [`crate::json::edit::splice`]).
const IN_PLACE: [&str; 2] = ["stream", "graph node id"];

/// One write: key, key as JSON, value as JSON.
pub(crate) type Quoted = (String, String, String);

#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Writes {
    /// Every write with dict semantics applied: a key keeps the place of its first
    /// write and the value of its last.
    pub(crate) all: Vec<Quoted>,
    /// Of those, the writes to `stream` and `graph node id`.
    pub(crate) in_place: Vec<Quoted>,
    /// The others as the members they append, `"k": v, "k2": v2`.
    pub(crate) run: String,
}

impl Writes {
    /// `writes` are `(key, value)` in the order the annotation makes them.
    pub(crate) fn new(writes: &[(String, String)]) -> Writes {
        let mut all: Vec<Quoted> = Vec::with_capacity(writes.len());
        for (key, value) in writes {
            match all.iter_mut().find(|w| &w.0 == key) {
                Some(w) => w.2 = quote(value),
                None => all.push((key.clone(), quote(key), quote(value))),
            }
        }
        let (in_place, others): (Vec<Quoted>, Vec<Quoted>) =
            all.iter().cloned().partition(|w| IN_PLACE.contains(&w.0.as_str()));
        let mut run = String::new();
        for (_, quoted_key, value) in &others {
            if !run.is_empty() {
                run.push_str(", ");
            }
            run.push_str(quoted_key);
            run.push_str(": ");
            run.push_str(value);
        }
        Writes { all, in_place, run }
    }

    /// These writes and then `key` with `json` written as it is (not as a string).
    pub(crate) fn with_raw(mut self, key: &str, json: &str) -> Writes {
        self.all.retain(|w| w.0 != key);
        self.all.push((key.to_string(), quote(key), json.to_string()));
        let run: Vec<String> = self
            .all
            .iter()
            .filter(|w| !IN_PLACE.contains(&w.0.as_str()))
            .map(|(_, k, v)| format!("{k}: {v}"))
            .collect();
        self.run = run.join(", ");
        self
    }

    pub(crate) fn writes_key(&self, key: &str) -> bool {
        self.in_place.iter().any(|w| w.0 == key)
    }

    /// Whether [`Writes::run`] appends where dict order puts those writes, on an event
    /// with `places` that also gets a `stream` when `lane_written`: after an appended
    /// `graph node id` (a recovered one comes first), never before an appended `stream`.
    pub(crate) fn run_fits(&self, places: &Places, lane_written: bool) -> bool {
        (places.stream.is_some() || (!lane_written && !self.writes_key("stream")))
            && (places.node.is_some() || !self.writes_key("graph node id"))
    }
}

/// An event's `args` writes in order: a recovered `graph node id`, the annotation's
/// (`all` of them, or only [`Writes::in_place`]), the `stream` of its lane.
pub(crate) fn args_writes<'b>(
    args: &mut Vec<Set<'b>>,
    node: Option<&'b str>,
    writes: Option<&'b Writes>,
    all: bool,
    stream: Option<&'b str>,
) {
    args.clear();
    if let Some(n) = node {
        args.push(Set { key: "graph node id", quoted_key: "\"graph node id\"", value: n });
    }
    if let Some(w) = writes {
        let list = if all { &w.all } else { &w.in_place };
        args.extend(list.iter().map(|(k, qk, v)| Set { key: k, quoted_key: qk, value: v }));
    }
    if let Some(lane) = stream {
        args.push(Set { key: "stream", quoted_key: "\"stream\"", value: lane });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(pairs: &[(&str, &str)]) -> Writes {
        Writes::new(&pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<Vec<_>>())
    }

    #[test]
    fn a_key_keeps_its_first_place_and_its_last_value() {
        let writes = w(&[("name", "a"), ("module", "m"), ("name", "b"), ("stream", "60"), ("layer", "0")]);
        let keys: Vec<&str> = writes.all.iter().map(|q| q.0.as_str()).collect();
        assert_eq!(keys, ["name", "module", "stream", "layer"]);
        assert_eq!(writes.all[0].2, "\"b\"");
        assert_eq!(writes.run, r#""name": "b", "module": "m", "layer": "0""#);
        assert_eq!(
            writes.in_place,
            vec![("stream".to_string(), "\"stream\"".to_string(), "\"60\"".to_string())]
        );
        assert!(writes.writes_key("stream") && !writes.writes_key("graph node id"));
    }

    /// The places of `"key": ` values in `event` as the scan records them.
    fn places_of(event: &str) -> Places {
        let rel = |key: &str| match event.find(&format!("\"{key}\": ")) {
            Some(at) => {
                let start = at + key.len() + 4;
                let len = event[start..].find([',', '}']).unwrap();
                crate::read::layout::Rel { start: start as u16, len: len as u16 }
            }
            None => crate::read::layout::Rel::NONE,
        };
        let args_close =
            event.find("\"args\": {").map_or(u16::MAX, |at| (at + event[at..].find('}').unwrap()) as u16);
        Places {
            tid: rel("tid"),
            ts: rel("ts"),
            stream: rel("stream"),
            node: rel("graph node id"),
            args_close,
            args_empty: event.contains("\"args\": {}"),
            exact: true,
        }
    }

    #[test]
    fn the_run_splices_what_parsing_every_write_gives() {
        use crate::json::edit::{splice, Editor, EventEdits};
        let events = [
            r#"{"ph": "X", "tid": 7, "ts": 1.5, "args": {"stream": 7, "graph node id": 5}}"#,
            r#"{"ph": "X", "tid": 7, "ts": 1.5, "args": {"graph node id": 5}}"#,
            r#"{"ph": "X", "tid": 7, "ts": 1.5, "args": {"stream": 7}}"#,
            r#"{"ph": "X", "tid": 7, "ts": 1.5, "args": {"correlation": 3}}"#,
            r#"{"ph": "X", "tid": 7, "ts": 1.5, "args": {}}"#,
        ];
        let annotations = [
            w(&[("name", "a"), ("module", "m"), ("name", "b")]),
            w(&[("name", "a"), ("stream", "60"), ("layer", "0")]),
            w(&[("graph node id", "9"), ("name", "a")]),
            w(&[("stream", "60")]),
            w(&[]),
        ];
        let (mut fitted, mut compared) = (0, 0);
        for event in events {
            let places = places_of(event);
            for writes in &annotations {
                for node in [None, Some("12")] {
                    for lane in [None, Some("60")] {
                        let mut all = EventEdits::default();
                        args_writes(&mut all.args, node, Some(writes), true, lane);
                        let mut parsed = Vec::new();
                        assert!(Editor::default().apply(event.as_bytes(), &all, &mut parsed));
                        if !writes.run_fits(&places, lane.is_some()) {
                            continue;
                        }
                        fitted += 1;
                        let mut some = EventEdits::default();
                        args_writes(&mut some.args, node, Some(writes), false, lane);
                        let mut spliced = Vec::new();
                        if splice(event.as_bytes(), &places, &some, &writes.run, &mut spliced) {
                            compared += 1;
                            assert_eq!(
                                String::from_utf8(spliced).unwrap(),
                                String::from_utf8(parsed).unwrap(),
                                "{event} {writes:?} {node:?} {lane:?}"
                            );
                        }
                    }
                }
            }
        }
        assert!(fitted < events.len() * annotations.len() * 4, "some combinations must not fit");
        assert!(compared >= 40, "only {compared} compared");
    }

    #[test]
    fn keys_and_values_are_quoted_as_json() {
        let writes = w(&[("a\"b", "x\ny")]);
        assert_eq!(writes.run, r#""a\"b": "x\ny""#);
        assert!(w(&[]).run.is_empty());
    }
}
