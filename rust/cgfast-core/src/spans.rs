//! Scope spans: for each replay on each lane, every maximal run of consecutive graphed
//! events whose annotation value of a dotted key (`module`: `model.layers.0.attn`)
//! starts with a prefix becomes one `gpu_user_annotation` event over the run, so that
//! viewers show the nested scopes of a graph replay as they show eager ranges.
//!
//! Events that overlap on a lane (by more than the repaired jitter) form one cluster
//! whose path is the common prefix of theirs (none where they belong to different
//! replays): a span never starts or ends inside an event, so spans on a lane are always
//! nested or disjoint, and an event lies inside the span of its whole value unless it
//! overlaps an event of another value (then of their common prefix).

use rustc_hash::FxHashMap as HashMap;

use crate::json::quote;
use crate::key::{KeyId, Keys, Num, Spelling};
use crate::passes::{is_lane_candidate, OddEvents};
use crate::trace::{NodeId, TraceIndex, NONE};

/// A scope span: a prefix of the key's value over a run of events on one lane.
#[derive(Clone, Debug, PartialEq)]
pub struct Span {
    pub pid: KeyId,
    pub pid_spelling: Spelling,
    pub lane: KeyId,
    pub lane_spelling: Spelling,
    /// The dotted prefix.
    pub name: String,
    /// The start of its first event, as that event has it.
    pub ts: Num,
    /// Start and end in nanoseconds ([`ticks`]).
    pub start: i128,
    pub end: i128,
}

/// A time in whole nanoseconds, as viewers read microseconds: integers exactly, floats
/// rounded (`None`: not finite). Spans are laid out in these, so that a viewer finds
/// each event inside its spans however its floats round.
pub fn ticks(n: Num) -> Option<i128> {
    match n {
        Num::Int(i) => Some(i as i128 * 1000),
        Num::Float(f) if f.is_finite() && f.abs() < 1e30 => Some((f * 1000.0).round() as i128),
        Num::Float(_) => None,
    }
}

/// A duration in nanoseconds as JSON microseconds: an integer where it is whole and
/// the trace writes integer times, else with three decimals.
fn micros_json(ns: i128, integer: bool) -> String {
    if integer && ns % 1000 == 0 {
        return (ns / 1000).to_string();
    }
    let sign = if ns < 0 { "-" } else { "" };
    format!("{sign}{}.{:03}", ns.abs() / 1000, ns.abs() % 1000)
}

impl Span {
    /// The span as a trace event, `key` naming the annotation key it shows.
    pub fn to_json(&self, keys: &Keys, key: &str) -> String {
        let pid = if self.pid == NONE { "0".to_string() } else { keys.to_json_spelled(keys.key(self.pid), self.pid_spelling) };
        format!(
            "{{\"ph\": \"X\", \"cat\": \"gpu_user_annotation\", \"name\": {}, \"pid\": {pid}, \"tid\": {}, \"ts\": {}, \"dur\": {}, \"args\": {{\"cgfast\": \"scope\", \"key\": {}}}}}",
            quote(&self.name),
            keys.to_json_spelled(keys.key(self.lane), self.lane_spelling),
            self.ts.to_json(),
            micros_json(self.end - self.start, matches!(self.ts, Num::Int(_))),
            quote(key)
        )
    }
}

/// One graphed event: where it ran, when, and its value's index in `values` (`NONE`: none).
struct Placed {
    pid: KeyId,
    lane: KeyId,
    replay: Option<i64>,
    event: u32,
    ts: Num,
    start: i128,
    end: i128,
    value: u32,
}

/// The spans of every replay and lane, from the events' final lanes and starts;
/// `value_of` gives the key's value for an annotated node.
pub fn scope_spans<'a>(index: &TraceIndex, value_of: impl Fn(NodeId) -> Option<&'a str>) -> Vec<Span> {
    let mut values: Vec<&'a str> = Vec::new();
    let mut value_ids: HashMap<NodeId, u32> = HashMap::default();
    let mut placed = Vec::new();
    for (i, e) in index.events.iter().enumerate() {
        if !is_lane_candidate(e, false, OddEvents::Skip) {
            continue;
        }
        let Some(ts) = e.current_ts() else { continue };
        let (Some(start), Some(dur)) = (ticks(ts), ticks(e.dur())) else { continue };
        let value = match e.annotation() {
            Some(node) => *value_ids.entry(node).or_insert_with(|| match value_of(node) {
                Some(v) => {
                    values.push(v);
                    values.len() as u32 - 1
                }
                None => NONE,
            }),
            _ => NONE,
        };
        placed.push(Placed { pid: e.pid, lane: e.current_tid(), replay: e.correlation(), event: i as u32, ts, start, end: start + dur, value });
    }
    // each lane's events together, in position order, then in start order
    placed.sort_by_key(|p| (p.pid, p.lane, p.event));
    let mut spans = Vec::new();
    for run in placed.chunk_by_mut(|a, b| (a.pid, a.lane) == (b.pid, b.lane)) {
        run.sort_by_key(|p| (p.start, p.event));
        spans_of_run(index, run, &values, &mut spans);
    }
    spans
}

/// The common dotted prefix of two paths.
fn common_prefix<'v>(a: &'v str, b: &str) -> &'v str {
    let mut end = 0;
    for ((i, x), y) in a.char_indices().zip(b.chars()) {
        if x != y {
            return &a[..end];
        }
        if x == '.' {
            end = i;
        }
    }
    let shorter = a.len().min(b.len());
    // one is the other or a dotted prefix of it
    if a.len() == b.len() || a.as_bytes().get(shorter) == Some(&b'.') || b.as_bytes().get(shorter) == Some(&b'.') {
        &a[..shorter]
    } else {
        &a[..end]
    }
}

/// The dotted prefixes of a path, shortest first.
fn prefixes(path: &str) -> impl Iterator<Item = &str> {
    path.match_indices('.').map(move |(i, _)| &path[..i]).chain((!path.is_empty()).then_some(path))
}

/// The spans of one lane, its events in start order: a run ends where the replay changes.
fn spans_of_run(index: &TraceIndex, run: &[Placed], values: &[&str], spans: &mut Vec<Span>) {
    let first = &run[0];
    let pid_spelling = index.events[first.event as usize].pid_spelling();
    let lane_spelling = index.events[first.event as usize].current_tid_spelling();
    // the spans open now, outermost first, by their position in `spans`
    let mut open: Vec<usize> = Vec::new();
    let mut open_replay = None;
    let mut k = 0;
    while k < run.len() {
        // a cluster: the events that start before the ones before them end
        let (ts, start, mut end, replay) = (run[k].ts, run[k].start, run[k].end, run[k].replay);
        let mut path: Option<&str> = None;
        let mut one_replay = true;
        loop {
            let p = &run[k];
            one_replay &= p.replay == replay;
            if p.value != NONE {
                let v = values[p.value as usize];
                path = Some(path.map_or(v, |q| common_prefix(q, v)));
            }
            end = end.max(p.end);
            k += 1;
            if k == run.len() || run[k].start >= end {
                break;
            }
        }
        let path = path.filter(|_| one_replay).unwrap_or("");
        if open_replay != Some(replay) {
            open.clear();
            open_replay = Some(replay);
        }
        let mut depth = 0;
        for prefix in prefixes(path) {
            match open.get(depth) {
                Some(&s) if spans[s].name == prefix => {}
                _ => break,
            }
            depth += 1;
        }
        open.truncate(depth);
        for &s in &open {
            spans[s].end = end;
        }
        for prefix in prefixes(path).skip(depth) {
            open.push(spans.len());
            spans.push(Span { pid: first.pid, pid_spelling, lane: first.lane, lane_spelling, name: prefix.to_string(), ts, start, end });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_prefixes_are_dotted() {
        assert_eq!(common_prefix("model.layers.0.attn", "model.layers.1.mlp"), "model.layers");
        assert_eq!(common_prefix("model.layers.1", "model.layers.10"), "model.layers");
        assert_eq!(common_prefix("model.layers.10", "model.layers.1"), "model.layers");
        assert_eq!(common_prefix("model.layers", "model.layers.1"), "model.layers");
        assert_eq!(common_prefix("model.layers.1", "model.layers"), "model.layers");
        assert_eq!(common_prefix("a", "a"), "a");
        assert_eq!(common_prefix("a", "b"), "");
        assert_eq!(prefixes("a.b.c").collect::<Vec<_>>(), ["a", "a.b", "a.b.c"]);
        assert_eq!(prefixes("").count(), 0);
    }
}
