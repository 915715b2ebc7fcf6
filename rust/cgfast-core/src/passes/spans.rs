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

use crate::index::keys::{KeyId, Num, Spelling};
use crate::index::{NodeId, TraceIndex, NONE};
use crate::json::quote;
use crate::passes::{is_lane_candidate, OddEvents};

/// A scope span: a prefix of the key's value over a run of events on one lane.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Span {
    /// Its pid and lane, by index in [`Spans::lanes`].
    pub lane: u32,
    /// The dotted prefix, by index in [`Spans::names`].
    pub name: u32,
    /// The event it starts with.
    pub first: u32,
    /// Start and end in nanoseconds ([`ticks`]) from [`Spans::base`].
    pub start: i64,
    pub end: i64,
}

/// The spans of a trace, with their names and lanes kept once each.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Spans {
    pub names: Vec<String>,
    /// (pid, lane, how the first event there spells them).
    pub lanes: Vec<(KeyId, KeyId, Spelling, Spelling)>,
    pub base: i128,
    pub spans: Vec<Span>,
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

/// Nanoseconds as JSON microseconds: an integer where they are whole and the trace
/// writes integer times, else with three decimals.
fn push_micros(out: &mut String, ns: i128, integer: bool) {
    if ns < 0 {
        out.push('-');
    }
    let ns = ns.unsigned_abs();
    let (whole, frac) = (ns / 1000, (ns % 1000) as u32);
    push_digits(out, whole);
    if !(integer && frac == 0) {
        let digits =
            [b'.', b'0' + (frac / 100) as u8, b'0' + (frac / 10 % 10) as u8, b'0' + (frac % 10) as u8];
        out.push_str(std::str::from_utf8(&digits).expect("ASCII"));
    }
}

/// The decimal digits of `n` (formatting a 128-bit number is slow; these mostly fit 64 bits).
fn push_digits(out: &mut String, n: u128) {
    let Ok(mut n) = u64::try_from(n) else {
        out.push_str(&n.to_string());
        return;
    };
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.push_str(std::str::from_utf8(&digits[at..]).expect("ASCII"));
}

impl Spans {
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// The spans as trace events, separated as in `traceEvents`; `key` names the
    /// annotation key they show.
    pub fn to_json(&self, index: &TraceIndex, key: &str) -> String {
        let keys = &index.keys;
        let names: Vec<String> = self.names.iter().map(|n| quote(n)).collect();
        let places: Vec<String> = self
            .lanes
            .iter()
            .map(|&(pid, lane, pid_spelling, lane_spelling)| {
                let pid = if pid == NONE {
                    "0".to_string()
                } else {
                    keys.to_json_spelled(keys.key(pid), pid_spelling)
                };
                format!(
                    ", \"pid\": {pid}, \"tid\": {}, \"ts\": ",
                    keys.to_json_spelled(keys.key(lane), lane_spelling)
                )
            })
            .collect();
        let tail = format!(", \"args\": {{\"cgfast\": \"scope\", \"key\": {}}}}}", quote(key));
        let mut out = String::with_capacity(self.spans.len() * (tail.len() + 120));
        for (i, span) in self.spans.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            let integer = matches!(index.events[span.first as usize].current_ts(), Some(Num::Int(_)));
            out.push_str("{\"ph\": \"X\", \"cat\": \"gpu_user_annotation\", \"name\": ");
            out.push_str(&names[span.name as usize]);
            out.push_str(&places[span.lane as usize]);
            push_micros(&mut out, self.base + span.start as i128, integer);
            out.push_str(", \"dur\": ");
            push_micros(&mut out, (span.end - span.start) as i128, integer);
            out.push_str(&tail);
        }
        out
    }
}

/// One graphed event: its lane's index, its position, its value's chain of prefixes
/// (`NONE`: no value) and its start and end ([`ticks`] from the base).
#[derive(Clone, Copy)]
struct Placed {
    lane: u32,
    event: u32,
    chain: u32,
    start: i64,
    end: i64,
}

/// The spans of every lane, from the events' final lanes and starts; `value_of` gives
/// the key's value for an annotated node.
pub fn scope_spans<'a>(index: &TraceIndex, value_of: impl Fn(NodeId) -> Option<&'a str>) -> Spans {
    let mut out = Spans::default();
    let mut name_ids: HashMap<&'a str, u32> = HashMap::default();
    // each value as the names of its prefixes, shortest first
    let mut chains: Vec<Vec<u32>> = Vec::new();
    let mut chain_of: HashMap<NodeId, u32> = HashMap::default();
    let mut lane_ids: HashMap<(KeyId, KeyId), u32> = HashMap::default();
    let mut placed = Vec::new();
    let mut base = None;
    for (i, e) in index.events.iter().enumerate() {
        if !is_lane_candidate(e, false, OddEvents::Skip) {
            continue;
        }
        let Some(ts) = e.current_ts() else { continue };
        let (Some(start), Some(dur)) = (ticks(ts), ticks(e.dur())) else { continue };
        let base = *base.get_or_insert(start);
        // a trace spanning centuries has no spans past them
        let (Ok(start), Ok(end)) = (i64::try_from(start - base), i64::try_from(start + dur - base)) else {
            continue;
        };
        let chain = match e.annotation() {
            Some(node) => *chain_of.entry(node).or_insert_with(|| match value_of(node) {
                Some(v) => {
                    let chain = prefixes(v)
                        .map(|prefix| {
                            *name_ids.entry(prefix).or_insert_with(|| {
                                out.names.push(prefix.to_string());
                                out.names.len() as u32 - 1
                            })
                        })
                        .collect();
                    chains.push(chain);
                    chains.len() as u32 - 1
                }
                None => NONE,
            }),
            None => NONE,
        };
        let lane = *lane_ids.entry((e.pid, e.current_tid())).or_insert_with(|| {
            out.lanes.push((e.pid, e.current_tid(), e.pid_spelling(), e.current_tid_spelling()));
            out.lanes.len() as u32 - 1
        });
        placed.push(Placed { lane, event: i as u32, chain, start, end });
    }
    out.base = base.unwrap_or(0);
    // each lane's events together (in position order: nearly in start order already),
    // then in start order
    let mut first_of_lane = vec![0usize; out.lanes.len() + 1];
    for p in &placed {
        first_of_lane[p.lane as usize + 1] += 1;
    }
    for lane in 1..first_of_lane.len() {
        first_of_lane[lane] += first_of_lane[lane - 1];
    }
    let mut by_lane = vec![Placed { lane: 0, event: 0, chain: NONE, start: 0, end: 0 }; placed.len()];
    let mut next = first_of_lane.clone();
    for p in placed {
        by_lane[next[p.lane as usize]] = p;
        next[p.lane as usize] += 1;
    }
    for lane in 0..out.lanes.len() {
        let run = &mut by_lane[first_of_lane[lane]..first_of_lane[lane + 1]];
        if !run.is_sorted_by_key(|p| (p.start, p.event)) {
            run.sort_unstable_by_key(|p| (p.start, p.event));
        }
        if !run.is_empty() {
            spans_of_lane(index, run, &chains, &mut out.spans);
        }
    }
    out
}

/// The dotted prefixes of a path, shortest first.
fn prefixes(path: &str) -> impl Iterator<Item = &str> {
    path.match_indices('.').map(move |(i, _)| &path[..i]).chain((!path.is_empty()).then_some(path))
}

/// The spans of one lane, its events in start order: a run ends where the replay changes.
fn spans_of_lane(index: &TraceIndex, run: &[Placed], chains: &[Vec<u32>], spans: &mut Vec<Span>) {
    let lane = run[0].lane;
    // the spans open now, outermost first, by their position in `spans`
    let mut open: Vec<usize> = Vec::new();
    let mut open_replay = None;
    let mut k = 0;
    while k < run.len() {
        // a cluster: the events that start before the ones before them end; its path is
        // the common prefix of their chains
        let (first, start, mut end) = (run[k].event, run[k].start, run[k].end);
        let replay = index.events[first as usize].correlation();
        let mut path: Option<&[u32]> = None;
        let mut one_replay = true;
        loop {
            let p = &run[k];
            if p.event != first {
                one_replay &= index.events[p.event as usize].correlation() == replay;
            }
            if p.chain != NONE {
                let chain = chains[p.chain as usize].as_slice();
                path = Some(match path {
                    None => chain,
                    Some(q) => &q[..q.iter().zip(chain).take_while(|(a, b)| a == b).count()],
                });
            }
            end = end.max(p.end);
            k += 1;
            if k == run.len() || run[k].start >= end {
                break;
            }
        }
        let path = path.filter(|_| one_replay).unwrap_or(&[]);
        if open_replay != Some(replay) {
            open.clear();
            open_replay = Some(replay);
        }
        let depth = open.iter().zip(path).take_while(|(&s, &name)| spans[s].name == name).count();
        open.truncate(depth);
        for &s in &open {
            spans[s].end = end;
        }
        for &name in &path[depth..] {
            open.push(spans.len());
            spans.push(Span { lane, name, first, start, end });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_dotted() {
        assert_eq!(prefixes("a.b.c").collect::<Vec<_>>(), ["a", "a.b", "a.b.c"]);
        assert_eq!(prefixes("layers.10").collect::<Vec<_>>(), ["layers", "layers.10"]);
        assert_eq!(prefixes("").count(), 0);
    }

    #[test]
    fn durations_are_written_in_microseconds() {
        let mut out = String::new();
        push_micros(&mut out, 2_500, false);
        out.push(' ');
        push_micros(&mut out, 3_000, true);
        out.push(' ');
        push_micros(&mut out, 3_000, false);
        out.push(' ');
        push_micros(&mut out, 7, true);
        out.push(' ');
        push_micros(&mut out, -1_234_567, false);
        out.push(' ');
        push_micros(&mut out, 1_733_212_345_678_901_234_000, true);
        out.push(' ');
        push_micros(&mut out, i128::MAX / 1000 * 1000, true);
        assert_eq!(out, format!("2.500 3 3.000 0.007 -1234.567 1733212345678901234 {}", i128::MAX / 1000));
    }
}
