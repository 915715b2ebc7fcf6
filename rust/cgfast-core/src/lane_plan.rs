//! The file pipeline's two lane passes — `move_overlapping`, then `fix_timestamps` —
//! decided over one sort of their candidates, on data of their own: so they can run on
//! a second thread while the annotate pass moves flows and removes noise. The decisions
//! are applied after that pass, where the reference runs them.

use rustc_hash::FxHashMap as HashMap;

use crate::key::{Key, KeyId, Num};
use crate::passes::{float_order, is_lane_candidate, is_plain_start, Fix, Fixed, LaneWalk, LargeOverlap, OddEvents, Timed};
use crate::trace::{Ph, TraceIndex};

/// What the lane passes read, taken from the index once every event has its lane.
pub struct LanePlan {
    timed: Vec<Timed>,
    /// The lanes' key ids, by `Timed::lane`; the overlap lane may not have one yet.
    lanes: Vec<Option<KeyId>>,
    default_lane: Option<u16>,
    overlap_lane: u16,
    streams: Streams,
    max_adjust_us: f64,
}

/// The default stream and the overlap stream, as the passes were asked for them.
#[derive(Clone, Copy)]
struct Streams {
    default: i64,
    overlap: i64,
}

/// Lanes numbered in order of appearance.
#[derive(Default)]
struct LaneTable {
    ids: HashMap<KeyId, u16>,
    keys: Vec<Option<KeyId>>,
}

impl LaneTable {
    /// The number of a lane (`None`: one with no key yet, always new); `None` past
    /// `u16::MAX` lanes.
    fn lane(&mut self, key: Option<KeyId>) -> Option<u16> {
        let next = u16::try_from(self.keys.len()).ok()?;
        let lane = match key {
            Some(k) => *self.ids.entry(k).or_insert(next),
            None => next,
        };
        if lane == next {
            self.keys.push(key);
        }
        Some(lane)
    }
}

/// The lane passes' decisions, by position in `index.events`.
pub struct LaneDecisions {
    lanes: Vec<Option<KeyId>>,
    overlap_lane: u16,
    streams: Streams,
    moved: Vec<u32>,
    new_starts: Vec<(u32, Num)>,
    /// Lane, event and overlap, in the reference's order.
    large: Vec<(u16, u32, f64)>,
}

impl LanePlan {
    /// The candidates of both passes, or `None` where this plan would not decide as the
    /// passes do (starts that do not sort as plain numbers; metadata the annotate pass
    /// may still remove; too many lanes): run the passes themselves then.
    pub fn gather(index: &TraceIndex, default_stream: i64, overlap_stream: i64, max_adjust_us: f64) -> Option<LanePlan> {
        let mut table = LaneTable::default();
        // room for every tracked event: what is not used is never touched
        let mut timed = Vec::with_capacity(index.events.len());
        for (i, e) in index.events.iter().enumerate() {
            if !is_lane_candidate(e, false, OddEvents::Skip) {
                continue;
            }
            let ts = e.current_ts()?;
            if e.ph == Ph::Meta || e.dur_is_odd() || !is_plain_start(ts) {
                return None;
            }
            let mut t = Timed::new(i, ts, e);
            t.lane = table.lane(Some(e.current_tid()))?;
            timed.push(t);
        }
        let default_lane = index.keys.find(Key::Int(default_stream)).and_then(|k| table.ids.get(&k).copied());
        let overlap_lane = table.lane(index.keys.find(Key::Int(overlap_stream)))?;
        let lanes = table.keys;
        let streams = Streams { default: default_stream, overlap: overlap_stream };
        Some(LanePlan { timed, lanes, default_lane, overlap_lane, streams, max_adjust_us })
    }

    /// Both passes' decisions: one walk in start order for each.
    pub fn decide(mut self) -> Option<LaneDecisions> {
        // (start, position) orders as Python's stable sort by start does
        self.timed.sort_unstable_by_key(|t| (float_order(t.ts().as_f64()), t.event));
        let mut moved = Vec::new();
        if let Some(default) = self.default_lane {
            let mut walk = LaneWalk::new();
            for t in self.timed.iter_mut().filter(|t| t.is_kernel() && t.lane == default) {
                if walk.overlaps(t).ok()? {
                    moved.push(t.event);
                    t.lane = self.overlap_lane;
                }
            }
        }
        let limit = Num::Float(self.max_adjust_us);
        let mut walks = vec![LaneWalk::new(); self.lanes.len()];
        let mut first_event = vec![u32::MAX; self.lanes.len()];
        let mut new_starts = Vec::new();
        let mut large = Vec::new();
        for t in &self.timed {
            let lane = t.lane as usize;
            first_event[lane] = first_event[lane].min(t.event);
            match walks[lane].fix(t, limit).ok()? {
                Fix::Kept => {}
                Fix::Moved(to) => new_starts.push((t.event, to)),
                Fix::TooLarge(overlap_us) => large.push((t.lane, t.event, overlap_us)),
            }
        }
        // the reference takes lanes in order of their first event, each in start order
        large.sort_by_key(|&(lane, ..)| first_event[lane as usize]);
        Some(LaneDecisions { lanes: self.lanes, overlap_lane: self.overlap_lane, streams: self.streams, moved, new_starts, large })
    }
}

impl LaneDecisions {
    /// Apply to the index the plan was gathered from: (kernels moved, timestamps fixed).
    pub fn apply(self, index: &mut TraceIndex) -> (u64, Fixed) {
        let mut lanes = self.lanes;
        // as `move_overlapping` does: the overlap lane's key is made wherever the default
        // stream has one (and only there can a kernel move)
        if index.keys.find(Key::Int(self.streams.default)).is_some() {
            lanes[self.overlap_lane as usize] = Some(index.keys.id(Key::Int(self.streams.overlap)));
        }
        let lane_key = |lane: u16| lanes[lane as usize].expect("a lane with events has a key");
        for &i in &self.moved {
            index.events[i as usize].set_lane(lane_key(self.overlap_lane));
        }
        for &(i, ts) in &self.new_starts {
            index.events[i as usize].set_ts(ts);
        }
        let large = self.large.iter().map(|&(lane, event, overlap_us)| LargeOverlap { event: event as usize, tid: lane_key(lane), overlap_us }).collect();
        (self.moved.len() as u64, Fixed { fixed: self.new_starts.len() as u64, large })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passes::tests::{annotations, ev, index, Ev};
    use crate::passes::{self, FlowLink};

    /// A small random trace: work and other events on a few lanes, starts that tie and
    /// overlap by more and less than the limit, graphed and not.
    fn random_events(seed: u64) -> Vec<Ev> {
        let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        let mut next = |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        let count = 1 + next(60);
        (0..count)
            .map(|_| {
                let cat = ["kernel", "kernel", "kernel", "gpu_memcpy", "gpu_memset", "cpu_op"][next(6) as usize];
                let tid = [7, 7, 7, 8, 20][next(5) as usize];
                let ts = next(40) as f64 + [0.0, 0.0, 0.25, 0.5][next(4) as usize];
                let dur = next(6) as f64 + [0.0, 0.3, 0.75][next(3) as usize];
                let node = [Some(1 + next(5) as i64), Some(1 + next(5) as i64), Some(0), None][next(4) as usize];
                ev(cat, tid, ts, dur, node)
            })
            .collect()
    }

    fn outcome(idx: &TraceIndex) -> Vec<(Key, Option<Num>)> {
        idx.events.iter().map(|e| (idx.keys.key(e.current_tid()), e.current_ts())).collect()
    }

    #[test]
    fn decides_as_the_passes_do() {
        let asked = annotations(&[(1, Some(8)), (2, None), (3, Some(20)), (4, Some(7))]);
        let mut large_seen = 0;
        for seed in 0..400 {
            let events = random_events(seed);
            for (default_stream, overlap_stream, limit) in [(7, 8, 1.0), (7, 99, 0.5), (5, 8, 1.0), (7, 7, 2.0)] {
                let (mut passes_did, mut plan_did) = (index(&events), index(&events));
                for idx in [&mut passes_did, &mut plan_did] {
                    passes::relane(idx, &asked, default_stream, FlowLink::Follow);
                }
                let moved = passes::move_overlapping(&mut passes_did, default_stream, overlap_stream);
                let fixed = passes::fix_timestamps(&mut passes_did, limit);
                let plan = LanePlan::gather(&plan_did, default_stream, overlap_stream, limit).expect("plain starts");
                let decided = plan.decide().expect("numbers only").apply(&mut plan_did);
                assert_eq!(decided, (moved, fixed.clone()), "seed {seed}, streams {default_stream}/{overlap_stream}");
                assert_eq!(outcome(&plan_did), outcome(&passes_did), "seed {seed}");
                assert_eq!(plan_did.keys.count(), passes_did.keys.count(), "the same keys made");
                large_seen += fixed.large.len();
            }
        }
        assert!(large_seen > 100, "the cases hold large overlaps on several lanes");
    }

    #[test]
    fn leaves_to_the_passes_what_it_would_not_decide_alike() {
        let nan = [ev("kernel", 7, f64::NAN, 1.0, Some(1)), ev("kernel", 7, 2.0, 1.0, Some(2))];
        assert!(LanePlan::gather(&index(&nan), 7, 8, 1.0).is_none(), "NaN starts sort as Python sorts them");
        let mut meta = ev("kernel", 7, 1.0, 1.0, Some(1));
        meta.ph = "M";
        assert!(LanePlan::gather(&index(&[meta]), 7, 8, 1.0).is_none(), "the annotate pass may remove metadata");
    }
}
