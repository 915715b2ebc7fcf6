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
//!
//! The spans are found in one walk over the events, each lane keeping only its open
//! spans and the cluster it is gathering, so that memory grows with the spans, not with
//! the trace. That needs a lane's events in start order, as traces write them; a lane
//! whose events are not is gathered again and sorted.

use std::io::{self, Write};

use rustc_hash::FxHashMap as HashMap;

use crate::index::keys::{KeyId, Num, Spelling};
use crate::index::{NodeId, TraceIndex, Tracked, NONE};
use crate::json::quote;
use crate::passes::{is_lane_candidate, OddEvents};

/// A scope span: a prefix of the key's value over a run of events on one lane.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Span {
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
    /// Each lane's spans (by index in `lanes`), in the order they open.
    pub spans: Vec<Vec<Span>>,
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
fn push_micros(out: &mut Vec<u8>, ns: i128, integer: bool) {
    if ns < 0 {
        out.push(b'-');
    }
    let ns = ns.unsigned_abs();
    let (whole, frac) = (ns / 1000, (ns % 1000) as u32);
    push_digits(out, whole);
    if !(integer && frac == 0) {
        out.extend_from_slice(&[
            b'.',
            b'0' + (frac / 100) as u8,
            b'0' + (frac / 10 % 10) as u8,
            b'0' + (frac % 10) as u8,
        ]);
    }
}

/// The decimal digits of `n` (formatting a 128-bit number is slow; these mostly fit 64 bits).
fn push_digits(out: &mut Vec<u8>, n: u128) {
    let Ok(mut n) = u64::try_from(n) else {
        out.extend_from_slice(n.to_string().as_bytes());
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
    out.extend_from_slice(&digits[at..]);
}

impl Spans {
    pub fn len(&self) -> usize {
        self.spans.iter().map(Vec::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.iter().all(Vec::is_empty)
    }

    /// Write the spans as trace events, lane by lane, separated as in `traceEvents`;
    /// `key` names the annotation key they show.
    pub fn write_json(&self, index: &TraceIndex, key: &str, out: &mut dyn Write) -> io::Result<()> {
        let keys = &index.keys;
        let names: Vec<String> = self.names.iter().map(|n| quote(n)).collect();
        let tail = format!(", \"args\": {{\"cgfast\": \"scope\", \"key\": {}}}}}", quote(key));
        let mut buffer = Vec::with_capacity(1 << 16);
        let mut separator: &[u8] = b"";
        for (&(pid, lane, pid_spelling, lane_spelling), spans) in self.lanes.iter().zip(&self.spans) {
            let pid =
                if pid == NONE { "0".to_string() } else { keys.to_json_spelled(keys.key(pid), pid_spelling) };
            let place = format!(
                ", \"pid\": {pid}, \"tid\": {}, \"ts\": ",
                keys.to_json_spelled(keys.key(lane), lane_spelling)
            );
            for span in spans {
                let integer = matches!(index.events[span.first as usize].current_ts(), Some(Num::Int(_)));
                buffer.extend_from_slice(separator);
                separator = b", ";
                buffer.extend_from_slice(b"{\"ph\": \"X\", \"cat\": \"gpu_user_annotation\", \"name\": ");
                buffer.extend_from_slice(names[span.name as usize].as_bytes());
                buffer.extend_from_slice(place.as_bytes());
                push_micros(&mut buffer, self.base + span.start as i128, integer);
                buffer.extend_from_slice(b", \"dur\": ");
                push_micros(&mut buffer, (span.end - span.start) as i128, integer);
                buffer.extend_from_slice(tail.as_bytes());
                if buffer.len() >= (1 << 16) - 512 {
                    out.write_all(&buffer)?;
                    buffer.clear();
                }
            }
        }
        out.write_all(&buffer)
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

/// What places events: the tables of names, chains and lanes, filled as events come.
struct Places<'a, F> {
    value_of: F,
    names: Vec<String>,
    name_ids: HashMap<&'a str, u32>,
    /// each value as the names of its prefixes, shortest first
    chains: Vec<Vec<u32>>,
    chain_of: HashMap<NodeId, u32>,
    lanes: Vec<(KeyId, KeyId, Spelling, Spelling)>,
    lane_ids: HashMap<(KeyId, KeyId), u32>,
    base: Option<i128>,
}

impl<'a, F: Fn(NodeId) -> Option<&'a str>> Places<'a, F> {
    /// Where event `i` lies, if it is a graphed event with a usable time.
    fn place(&mut self, i: usize, e: &Tracked) -> Option<Placed> {
        if !is_lane_candidate(e, false, OddEvents::Skip) {
            return None;
        }
        let (start, dur) = (ticks(e.current_ts()?)?, ticks(e.dur())?);
        let base = *self.base.get_or_insert(start);
        // a trace spanning centuries has no spans past them
        let (Ok(start), Ok(end)) = (i64::try_from(start - base), i64::try_from(start + dur - base)) else {
            return None;
        };
        let chain = match e.annotation() {
            Some(node) => match self.chain_of.get(&node) {
                Some(&chain) => chain,
                None => {
                    let chain = self.chain(node);
                    self.chain_of.insert(node, chain);
                    chain
                }
            },
            None => NONE,
        };
        let lane = *self.lane_ids.entry((e.pid, e.current_tid())).or_insert_with(|| {
            self.lanes.push((e.pid, e.current_tid(), e.pid_spelling(), e.current_tid_spelling()));
            self.lanes.len() as u32 - 1
        });
        Some(Placed { lane, event: i as u32, chain, start, end })
    }

    /// The chain of a node's value (`NONE`: it has none).
    fn chain(&mut self, node: NodeId) -> u32 {
        let Some(value) = (self.value_of)(node) else { return NONE };
        let chain = prefixes(value)
            .map(|prefix| {
                *self.name_ids.entry(prefix).or_insert_with(|| {
                    self.names.push(prefix.to_string());
                    self.names.len() as u32 - 1
                })
            })
            .collect();
        self.chains.push(chain);
        self.chains.len() as u32 - 1
    }
}

/// The spans of every lane, from the events' final lanes and starts; `value_of` gives
/// the key's value for an annotated node.
pub fn scope_spans<'a>(index: &TraceIndex, value_of: impl Fn(NodeId) -> Option<&'a str>) -> Spans {
    let mut places = Places {
        value_of,
        names: Vec::new(),
        name_ids: HashMap::default(),
        chains: Vec::new(),
        chain_of: HashMap::default(),
        lanes: Vec::new(),
        lane_ids: HashMap::default(),
        base: None,
    };
    let mut lanes: Vec<LaneSpans> = Vec::new();
    for (i, e) in index.events.iter().enumerate() {
        let Some(p) = places.place(i, e) else { continue };
        if p.lane as usize == lanes.len() {
            lanes.push(LaneSpans::new());
        }
        let lane = &mut lanes[p.lane as usize];
        if lane.unsorted {
            continue;
        }
        if p.start < lane.last_start {
            *lane = LaneSpans { unsorted: true, ..LaneSpans::new() };
            continue;
        }
        lane.push(p, e.correlation(), &places.chains);
    }
    // the lanes whose events are not in start order: gathered, sorted and walked again
    if lanes.iter().any(|lane| lane.unsorted) {
        let mut gathered: Vec<Vec<Placed>> = vec![Vec::new(); lanes.len()];
        for (i, e) in index.events.iter().enumerate() {
            if let Some(p) = places.place(i, e).filter(|p| lanes[p.lane as usize].unsorted) {
                gathered[p.lane as usize].push(p);
            }
        }
        for (lane, mut run) in lanes.iter_mut().zip(gathered).filter(|(lane, _)| lane.unsorted) {
            run.sort_unstable_by_key(|p| (p.start, p.event));
            *lane = LaneSpans::new();
            for p in run {
                lane.push(p, index.events[p.event as usize].correlation(), &places.chains);
            }
        }
    }
    Spans {
        names: places.names,
        lanes: places.lanes,
        base: places.base.unwrap_or(0),
        spans: lanes.into_iter().map(|lane| lane.finish(&places.chains)).collect(),
    }
}

/// The dotted prefixes of a path, shortest first.
fn prefixes(path: &str) -> impl Iterator<Item = &str> {
    path.match_indices('.').map(move |(i, _)| &path[..i]).chain((!path.is_empty()).then_some(path))
}

/// The events that start before the ones before them end: its path is the common
/// prefix of their chains.
#[derive(Clone, Copy)]
struct Cluster {
    first: u32,
    start: i64,
    end: i64,
    replay: Option<i64>,
    /// The path: the first `depth` names of chain `chain` (`NONE`: no event has one).
    chain: u32,
    depth: u32,
    one_replay: bool,
}

/// One lane's spans, its events given in start order: a run ends where the replay
/// changes.
struct LaneSpans {
    spans: Vec<Span>,
    /// The spans open now, outermost first, by their position in `spans`.
    open: Vec<u32>,
    open_replay: Option<Option<i64>>,
    cluster: Option<Cluster>,
    /// The start of the last event (`i64::MIN` before the first).
    last_start: i64,
    /// Events came out of start order: the lane is walked again, sorted.
    unsorted: bool,
}

impl LaneSpans {
    fn new() -> LaneSpans {
        LaneSpans {
            spans: Vec::new(),
            open: Vec::new(),
            open_replay: None,
            cluster: None,
            last_start: i64::MIN,
            unsorted: false,
        }
    }

    fn push(&mut self, p: Placed, replay: Option<i64>, chains: &[Vec<u32>]) {
        self.last_start = p.start;
        let chain_len = |chain: u32| if chain == NONE { 0 } else { chains[chain as usize].len() as u32 };
        if let Some(c) = self.cluster.as_mut().filter(|c| p.start < c.end) {
            c.one_replay &= replay == c.replay;
            if p.chain != NONE {
                if c.chain == NONE {
                    (c.chain, c.depth) = (p.chain, chain_len(p.chain));
                } else {
                    let (path, other) =
                        (&chains[c.chain as usize][..c.depth as usize], &chains[p.chain as usize]);
                    c.depth = path.iter().zip(other).take_while(|(a, b)| a == b).count() as u32;
                }
            }
            c.end = c.end.max(p.end);
            return;
        }
        if let Some(c) = self.cluster.take() {
            self.close(c, chains);
        }
        self.cluster = Some(Cluster {
            first: p.event,
            start: p.start,
            end: p.end,
            replay,
            chain: p.chain,
            depth: chain_len(p.chain),
            one_replay: true,
        });
    }

    /// The cluster's path continues the open spans it shares, and opens the rest.
    fn close(&mut self, c: Cluster, chains: &[Vec<u32>]) {
        let path: &[u32] = match c.chain {
            NONE => &[],
            _ if !c.one_replay => &[],
            chain => &chains[chain as usize][..c.depth as usize],
        };
        if self.open_replay != Some(c.replay) {
            self.open.clear();
            self.open_replay = Some(c.replay);
        }
        let spans = &mut self.spans;
        let depth =
            self.open.iter().zip(path).take_while(|(&s, &name)| spans[s as usize].name == name).count();
        self.open.truncate(depth);
        for &s in &self.open {
            spans[s as usize].end = c.end;
        }
        for &name in &path[depth..] {
            self.open.push(spans.len() as u32);
            spans.push(Span { name, first: c.first, start: c.start, end: c.end });
        }
    }

    fn finish(mut self, chains: &[Vec<u32>]) -> Vec<Span> {
        if let Some(c) = self.cluster.take() {
            self.close(c, chains);
        }
        self.spans
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
        let mut out = Vec::new();
        push_micros(&mut out, 2_500, false);
        out.push(b' ');
        push_micros(&mut out, 3_000, true);
        out.push(b' ');
        push_micros(&mut out, 3_000, false);
        out.push(b' ');
        push_micros(&mut out, 7, true);
        out.push(b' ');
        push_micros(&mut out, -1_234_567, false);
        out.push(b' ');
        push_micros(&mut out, 1_733_212_345_678_901_234_000, true);
        out.push(b' ');
        push_micros(&mut out, i128::MAX / 1000 * 1000, true);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!("2.500 3 3.000 0.007 -1234.567 1733212345678901234 {}", i128::MAX / 1000)
        );
    }
}
