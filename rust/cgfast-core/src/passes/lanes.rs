//! The reference's two lane passes — `_move_overlapping_to_stream`, then
//! `_fix_overlapping_timestamps` — in one implementation that the file pipeline and the
//! dict functions share: their candidates gathered once into data of their own, sorted
//! once, decided there (so the pipeline can decide on a second thread while the
//! annotate pass moves flows and removes noise) and applied to the index at the end.

use rustc_hash::FxHashMap as HashMap;

use crate::index::keys::{Key, KeyId, Num};
use crate::index::{Field, Ph, TraceIndex};
use crate::passes::{
    float_order, is_lane_candidate, is_plain_start, sort_by_start, Fix, Fixed, LaneWalk, LargeOverlap,
    OddEvents, Refusal, Refused, Timed, TIMED_LANES,
};

/// Which of the lane passes to run, and how.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LanePasses {
    /// `_move_overlapping_to_stream`: (default stream, overlap stream).
    pub(crate) overlap: Option<(i64, i64)>,
    /// `_fix_overlapping_timestamps`: the largest overlap (µs) taken for jitter.
    pub(crate) max_adjust_us: Option<f64>,
    pub(crate) odd: OddEvents,
}

/// What the lane passes read, taken from the index once every event has its lane.
pub(crate) struct LanePlan {
    timed: Vec<Timed>,
    /// Candidates without a numeric start (only where odd events are refused): position,
    /// lane, whether a kernel, and why the reference would fail on them.
    unstarted: Vec<(u32, u32, bool, Refusal)>,
    /// The lanes' key ids, by `Timed::lane`; the overlap lane may not have one yet.
    lanes: Vec<Option<KeyId>>,
    default_lane: Option<u32>,
    overlap_lane: Option<u32>,
    passes: LanePasses,
    /// A candidate is metadata, which the annotate pass may still remove.
    holds_metadata: bool,
    /// More lanes than a plan numbers ([`TIMED_LANES`], far beyond what traces hold):
    /// the passes leave the trace as it is.
    too_many_lanes: bool,
}

/// Lanes numbered in order of appearance.
#[derive(Default)]
struct LaneTable {
    ids: HashMap<KeyId, u32>,
    keys: Vec<Option<KeyId>>,
}

impl LaneTable {
    /// The number of a lane (`None`: one with no key yet, always new); `None` past
    /// [`TIMED_LANES`] lanes.
    fn lane(&mut self, key: Option<KeyId>) -> Option<u32> {
        let next = u32::try_from(self.keys.len()).ok().filter(|&n| n < TIMED_LANES)?;
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
pub(crate) struct LaneDecisions {
    lanes: Vec<Option<KeyId>>,
    overlap_lane: Option<u32>,
    passes: LanePasses,
    moved: Result<Vec<u32>, Refused>,
    new_starts: Vec<(u32, Num)>,
    /// Lane, event and overlap, in the reference's order.
    large: Vec<(u32, u32, f64)>,
    fix_refused: Option<Refused>,
}

/// What the passes did: each either ran or refused the trace and changed nothing.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct LaneOutcome {
    pub(crate) moved: Result<u64, Refused>,
    pub(crate) fixed: Result<Fixed, Refused>,
}

/// The first refusal of `refusals` (in position order) as the reference meets it:
/// a missing start before a start that is not a number.
fn first_refusal(refusals: impl Iterator<Item = (u32, Refusal)>) -> Option<Refused> {
    let mut first: Option<(u32, Refusal)> = None;
    for (event, why) in refusals {
        match first {
            Some((_, Refusal::NoTs)) => {}
            Some(_) if why != Refusal::NoTs => {}
            _ => first = Some((event, why)),
        }
    }
    first.map(|(event, why)| Refused { event: event as usize, why })
}

impl LanePlan {
    /// The candidates of the passes asked for.
    pub(crate) fn gather(index: &TraceIndex, passes: LanePasses) -> LanePlan {
        let mut table = LaneTable::default();
        // room for every tracked event: what is not used is never touched
        let mut timed = Vec::with_capacity(index.events.len());
        let mut unstarted = Vec::new();
        let mut holds_metadata = false;
        let mut too_many_lanes = false;
        for (i, e) in index.events.iter().enumerate() {
            if !is_lane_candidate(e, false, passes.odd) {
                continue;
            }
            holds_metadata |= e.ph == Ph::Meta;
            let Some(lane) = table.lane(Some(e.current_tid())) else {
                too_many_lanes = true;
                break;
            };
            match e.current_ts() {
                Some(ts) => {
                    let mut t = Timed::new(i, ts, e);
                    t.set_lane(lane);
                    timed.push(t);
                }
                None => {
                    let why =
                        if e.ts_field() == Field::Missing { Refusal::NoTs } else { Refusal::TsNotANumber };
                    unstarted.push((i as u32, lane, e.cat == crate::index::Cat::Kernel, why));
                }
            }
        }
        let default_lane = passes.overlap.and_then(|(default, _)| {
            index.keys.find(Key::Int(default)).and_then(|k| table.ids.get(&k).copied())
        });
        let overlap_lane =
            passes.overlap.and_then(|(_, overlap)| table.lane(index.keys.find(Key::Int(overlap))));
        too_many_lanes |= passes.overlap.is_some() && overlap_lane.is_none();
        LanePlan {
            timed,
            unstarted,
            lanes: table.keys,
            default_lane,
            overlap_lane,
            passes,
            holds_metadata,
            too_many_lanes,
        }
    }

    /// Whether the plan may be decided before the annotate pass removes noise and
    /// metadata (none of its candidates is metadata, which that pass may remove).
    pub(crate) fn holds_metadata(&self) -> bool {
        self.holds_metadata
    }

    /// The passes' decisions: the first in start order on the default lane's kernels,
    /// the second on every lane in start order.
    pub(crate) fn decide(mut self) -> LaneDecisions {
        if self.too_many_lanes {
            self.timed.clear();
            self.unstarted.clear();
            self.default_lane = None;
        }
        // where every start is plain, (start, position) orders as Python's stable sort
        // by start does, and one sort serves both passes; else each walk sorts its own
        let plain = self.timed.iter().all(|t| is_plain_start(t.ts()));
        if plain {
            self.timed.sort_unstable_by_key(|t| (float_order(t.ts().as_f64()), t.event));
        }
        let moved = self.move_overlapping(plain);
        let (new_starts, large, fix_refused) = match self.passes.max_adjust_us {
            Some(limit) => self.fix_timestamps(plain, limit),
            None => Default::default(),
        };
        LaneDecisions {
            lanes: self.lanes,
            overlap_lane: self.overlap_lane,
            passes: self.passes,
            moved,
            new_starts,
            large,
            fix_refused,
        }
    }

    /// `_move_overlapping_to_stream`: the kernels of the default lane that start before
    /// the one before them ended take the overlap lane.
    fn move_overlapping(&mut self, plain: bool) -> Result<Vec<u32>, Refused> {
        let (Some(default), Some(overlap_lane)) = (self.default_lane, self.overlap_lane) else {
            return Ok(Vec::new());
        };
        let on_default = self.unstarted.iter().filter(|u| u.2 && u.1 == default).map(|u| (u.0, u.3));
        if let Some(refused) = first_refusal(on_default) {
            return Err(refused);
        }
        let timed = &mut self.timed;
        let on_default = |t: &Timed| t.is_kernel() && t.lane() == default;
        let mut walk = LaneWalk::new();
        let mut moving = Vec::new();
        if plain {
            // already in start order
            for (k, t) in timed.iter().enumerate().filter(|(_, t)| on_default(t)) {
                if walk.overlaps(t)? {
                    moving.push(k as u32);
                }
            }
        } else {
            let mut order: Vec<u32> =
                (0..timed.len() as u32).filter(|&k| on_default(&timed[k as usize])).collect();
            sort_by_start(&mut order, |&k| timed[k as usize].ts(), |&k| timed[k as usize].event as usize);
            for k in order {
                if walk.overlaps(&timed[k as usize])? {
                    moving.push(k);
                }
            }
        }
        Ok(moving
            .into_iter()
            .map(|k| {
                let t = &mut timed[k as usize];
                t.set_lane(overlap_lane);
                t.event
            })
            .collect())
    }

    /// `_fix_overlapping_timestamps`: per lane, in order of the lanes' first events, an
    /// event that starts at most `limit` before the work before it ended moves to that
    /// end. The new starts, the large overlaps in the reference's order, or a refusal.
    #[allow(clippy::type_complexity)]
    fn fix_timestamps(
        &mut self,
        plain: bool,
        limit: f64,
    ) -> (Vec<(u32, Num)>, Vec<(u32, u32, f64)>, Option<Refused>) {
        let lanes = self.lanes.len();
        let mut first_event = vec![u32::MAX; lanes];
        let mut refused: Vec<Option<Refused>> = vec![None; lanes];
        if !self.unstarted.is_empty() {
            for (lane, slot) in refused.iter_mut().enumerate() {
                *slot =
                    first_refusal(self.unstarted.iter().filter(|u| u.1 as usize == lane).map(|u| (u.0, u.3)));
            }
            for u in &self.unstarted {
                first_event[u.1 as usize] = first_event[u.1 as usize].min(u.0);
            }
        }
        if !plain {
            // each lane's events together, in position order, then each in start order
            self.timed.sort_by_key(Timed::lane);
            for lane in self.timed.chunk_by_mut(|a, b| a.lane() == b.lane()) {
                sort_by_start(lane, Timed::ts, |t| t.event as usize);
            }
        }
        let limit = Num::Float(limit);
        let mut walks = vec![LaneWalk::new(); lanes];
        let mut new_starts = Vec::new();
        let mut large = Vec::new();
        for t in &self.timed {
            let lane = t.lane() as usize;
            first_event[lane] = first_event[lane].min(t.event);
            if refused[lane].is_some() {
                continue;
            }
            match walks[lane].fix(t, limit) {
                Ok(Fix::Kept) => {}
                Ok(Fix::Moved(to)) => new_starts.push((t.event, to)),
                Ok(Fix::TooLarge(overlap_us)) => large.push((t.lane(), t.event, overlap_us)),
                Err(why) => refused[lane] = Some(why),
            }
        }
        // the reference walks lanes in order of their first event and stops at the first
        // it fails on
        let first_refused = (0..lanes)
            .filter_map(|l| refused[l].map(|r| (first_event[l], r)))
            .min_by_key(|&(first, _)| first)
            .map(|(_, r)| r);
        if first_refused.is_some() {
            return (Vec::new(), Vec::new(), first_refused);
        }
        large.sort_by_key(|&(lane, ..)| first_event[lane as usize]);
        (new_starts, large, None)
    }
}

impl LaneDecisions {
    /// Apply to the index the plan was gathered from.
    pub(crate) fn apply(self, index: &mut TraceIndex) -> LaneOutcome {
        let mut lanes = self.lanes;
        // as the reference's pass makes it: the overlap lane's key exists wherever the
        // default stream has one and the pass ran (and only there can a kernel move)
        if let (Some((default, overlap)), Some(lane), Ok(_)) =
            (self.passes.overlap, self.overlap_lane, &self.moved)
        {
            if index.keys.find(Key::Int(default)).is_some() {
                lanes[lane as usize] = Some(index.keys.id(Key::Int(overlap)));
            }
        }
        let lane_key = |lane: u32| lanes[lane as usize].expect("a lane with events has a key");
        let moved = self.moved.map(|moved| {
            if let Some(overlap_lane) = self.overlap_lane {
                for &i in &moved {
                    index.events[i as usize].set_lane(lane_key(overlap_lane));
                }
            }
            moved.len() as u64
        });
        let fixed = match self.fix_refused {
            Some(refused) => Err(refused),
            None => {
                for &(i, ts) in &self.new_starts {
                    index.events[i as usize].set_ts(ts);
                }
                let large = self
                    .large
                    .iter()
                    .map(|&(lane, event, overlap_us)| LargeOverlap {
                        event: event as usize,
                        tid: lane_key(lane),
                        overlap_us,
                    })
                    .collect();
                Ok(Fixed { fixed: self.new_starts.len() as u64, large })
            }
        };
        LaneOutcome { moved, fixed }
    }
}

/// Run the passes asked for on `index`.
pub(crate) fn run(index: &mut TraceIndex, passes: LanePasses) -> LaneOutcome {
    LanePlan::gather(index, passes).decide().apply(index)
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
                let cat =
                    ["kernel", "kernel", "kernel", "gpu_memcpy", "gpu_memset", "cpu_op"][next(6) as usize];
                let tid = [7, 7, 7, 8, 20][next(5) as usize];
                let ts = next(40) as f64 + [0.0, 0.0, 0.25, 0.5][next(4) as usize];
                let dur = next(6) as f64 + [0.0, 0.3, 0.75][next(3) as usize];
                let node =
                    [Some(1 + next(5) as i64), Some(1 + next(5) as i64), Some(0), None][next(4) as usize];
                ev(cat, tid, ts, dur, node)
            })
            .collect()
    }

    fn outcome(idx: &TraceIndex) -> Vec<(Key, Option<Num>)> {
        idx.events.iter().map(|e| (idx.keys.key(e.current_tid()), e.current_ts())).collect()
    }

    /// The reference's two functions as its Python writes them, on the events' lanes
    /// and float times: (lane and start of each event, moved, fixed, large overlaps as
    /// (position, lane, overlap)).
    #[allow(clippy::type_complexity)]
    fn reference(
        idx: &TraceIndex,
        default: i64,
        overlap: i64,
        limit: f64,
    ) -> (Vec<(i64, f64)>, u64, u64, Vec<(usize, i64, f64)>) {
        let mut state: Vec<(i64, f64)> = idx
            .events
            .iter()
            .map(|e| (idx.keys.key(e.current_tid()).as_int().unwrap(), e.current_ts().unwrap().as_f64()))
            .collect();
        let graphed_work = |i: usize| idx.events[i].cat.is_work() && idx.events[i].current_node().graphed();
        let dur = |i: usize| idx.events[i].dur().as_f64();
        let mut kernels: Vec<usize> = (0..state.len())
            .filter(|&i| {
                graphed_work(i) && idx.events[i].cat == crate::index::Cat::Kernel && state[i].0 == default
            })
            .collect();
        kernels.sort_by(|&a, &b| state[a].1.partial_cmp(&state[b].1).unwrap());
        let (mut prev_end, mut moved) = (0.0, 0);
        for i in kernels {
            if state[i].1 < prev_end {
                state[i].0 = overlap;
                moved += 1;
            } else {
                prev_end = state[i].1 + dur(i);
            }
        }
        let mut lanes: Vec<(i64, Vec<usize>)> = Vec::new();
        for i in (0..state.len()).filter(|&i| graphed_work(i)) {
            match lanes.iter_mut().find(|(l, _)| *l == state[i].0) {
                Some((_, events)) => events.push(i),
                None => lanes.push((state[i].0, vec![i])),
            }
        }
        let (mut fixed, mut large) = (0, Vec::new());
        for (lane, mut events) in lanes {
            events.sort_by(|&a, &b| state[a].1.partial_cmp(&state[b].1).unwrap());
            let mut prev_end = 0.0;
            for i in events {
                if state[i].1 < prev_end {
                    let overlap = prev_end - state[i].1;
                    if overlap <= limit {
                        state[i].1 = prev_end;
                        fixed += 1;
                    } else {
                        large.push((i, lane, overlap));
                    }
                }
                prev_end = state[i].1 + dur(i);
            }
        }
        (state, moved, fixed, large)
    }

    #[test]
    fn decides_as_the_reference_does() {
        let asked = annotations(&[(1, Some(8)), (2, None), (3, Some(20)), (4, Some(7))]);
        let mut large_seen = 0;
        for seed in 0..400 {
            let events = random_events(seed);
            for (default_stream, overlap_stream, limit) in
                [(7, 8, 1.0), (7, 99, 0.5), (5, 8, 1.0), (7, 7, 2.0)]
            {
                let (mut one_plan, mut each_pass) = (index(&events), index(&events));
                for idx in [&mut one_plan, &mut each_pass] {
                    passes::relane(idx, &asked, default_stream, FlowLink::Follow);
                }
                let (expected, moved, fixed, large) =
                    reference(&one_plan, default_stream, overlap_stream, limit);
                let both = LanePasses {
                    overlap: Some((default_stream, overlap_stream)),
                    max_adjust_us: Some(limit),
                    odd: OddEvents::Skip,
                };
                let done = run(&mut one_plan, both);
                let each = (
                    passes::move_overlapping(&mut each_pass, default_stream, overlap_stream),
                    passes::fix_timestamps(&mut each_pass, limit),
                );
                let done = (done.moved.unwrap(), done.fixed.unwrap());
                assert_eq!(done, each, "seed {seed}: one plan decides as the passes one after the other");
                assert_eq!(outcome(&one_plan), outcome(&each_pass), "seed {seed}");
                assert_eq!(one_plan.keys.count(), each_pass.keys.count(), "the same keys made");
                let lanes_and_starts: Vec<(i64, f64)> = outcome(&one_plan)
                    .iter()
                    .map(|(k, ts)| (k.as_int().unwrap(), ts.unwrap().as_f64()))
                    .collect();
                assert_eq!(
                    lanes_and_starts, expected,
                    "seed {seed}, streams {default_stream}/{overlap_stream}"
                );
                assert_eq!((done.0, done.1.fixed), (moved, fixed));
                let got_large: Vec<(usize, i64, f64)> = done
                    .1
                    .large
                    .iter()
                    .map(|l| (l.event, one_plan.keys.key(l.tid).as_int().unwrap(), l.overlap_us))
                    .collect();
                assert_eq!(got_large, large, "seed {seed}");
                large_seen += large.len();
            }
        }
        assert!(large_seen > 100, "the cases hold large overlaps on several lanes");
    }

    #[test]
    fn starts_that_are_no_plain_numbers_sort_per_walk() {
        // NaN sorts as Python's comparisons leave it, per lane: the plan sorts each walk
        // on its own instead of all at once
        let events = [
            ev("kernel", 7, f64::NAN, 1.0, Some(1)),
            ev("kernel", 7, 2.0, 1.0, Some(2)),
            ev("kernel", 7, 2.5, 1.0, Some(3)),
            ev("kernel", 8, 0.0, 9.0, Some(4)),
            ev("kernel", 8, 3.0, 1.0, Some(5)),
        ];
        let mut idx = index(&events);
        let plan = LanePlan::gather(
            &idx,
            LanePasses { overlap: Some((7, 8)), max_adjust_us: Some(1.0), odd: OddEvents::Skip },
        );
        assert!(!plan.holds_metadata());
        let done = plan.decide().apply(&mut idx);
        assert_eq!(done.moved, Ok(1), "2.5 starts before 2.0 + 1.0 ends");
        // lane 8: 0.0 (ends 9.0), 2.5 moved there overlaps by 6.5 (the lane now ends at
        // 3.5), 3.0 by 0.5: repaired
        let fixed = done.fixed.unwrap();
        assert_eq!(fixed.large.iter().map(|l| l.event).collect::<Vec<_>>(), vec![2]);
        assert_eq!((fixed.fixed, idx.events[4].new_ts()), (1, Some(Num::Float(3.5))));
    }

    #[test]
    fn metadata_candidates_are_flagged_for_after_the_annotate_pass() {
        let mut meta = ev("kernel", 7, 1.0, 1.0, Some(1));
        meta.ph = "M";
        let passes = LanePasses { overlap: Some((7, 8)), max_adjust_us: Some(1.0), odd: OddEvents::Skip };
        assert!(LanePlan::gather(&index(&[meta]), passes).holds_metadata());
    }
}
