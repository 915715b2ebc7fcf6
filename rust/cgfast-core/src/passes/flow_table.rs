//! The flow-finish events by their place (lane and start), for the annotate pass to
//! find the flows of each event it moves.

use crate::index::keys::{Key, KeyId};
use crate::index::{Kept, TraceIndex, NONE};

/// Flows by their (tid, ts), in a table where places close in time sit close together:
/// events and flows are walked in file order, which is nearly time order, so the lookups
/// stay in cache. Each slot holds its first flow, then a chain through the others (which
/// may include other places that land alike: lookups check). The reference indexes a
/// `ts` that is not a number too (the dict API keeps its key).
pub(crate) struct FlowsByPlace {
    pub(crate) first_at: Vec<u32>,
    mask: u64,
    next_at: Vec<u32>,
    by_time: bool,
}

pub(crate) type Place = (KeyId, Key);

pub(crate) fn place_of(index: &TraceIndex, tid: KeyId, kept: Kept) -> Option<Place> {
    index.ts_key(kept).map(|ts| (tid, ts))
}

/// Where a place goes in the table: by its whole microseconds, offset by lane, or (for
/// traces whose places crowd into few microseconds) by a hash of the place.
fn place_slot(place: &Place, by_time: bool) -> u64 {
    use std::hash::BuildHasher;
    let time = match place.1 {
        Key::Int(i) if by_time => i as u64,
        Key::Float(bits) if by_time => f64::from_bits(bits) as i64 as u64,
        _ => return rustc_hash::FxBuildHasher.hash_one(place),
    };
    time.wrapping_add((place.0 as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

impl FlowsByPlace {
    pub(crate) fn new(index: &TraceIndex) -> FlowsByPlace {
        Self::build(index, true)
            .unwrap_or_else(|| Self::build(index, false).expect("a hashed table takes any trace"))
    }

    /// The table, or `None` when laid out by time and more than one flow in eight
    /// shares its microsecond and lane with another place (lookups would walk long chains).
    fn build(index: &TraceIndex, by_time: bool) -> Option<FlowsByPlace> {
        let slots = (index.flows.len() * 2).next_power_of_two().max(16);
        let mask = slots as u64 - 1;
        let mut first_at: Vec<u32> = vec![NONE; slots];
        let mut next_at: Vec<u32> = vec![NONE; index.flows.len()];
        let mut crowded = 0;
        for i in (0..index.flows.len()).rev() {
            if let Some(place) = place_of(index, index.flows[i].tid, Kept::Flow(i)) {
                let at = place_slot(&place, by_time);
                let slot = &mut first_at[(at & mask) as usize];
                if by_time && *slot != NONE {
                    let head = place_of(index, index.flows[*slot as usize].tid, Kept::Flow(*slot as usize));
                    // another place in the same microsecond of the same lane (not one that
                    // only lands alike, as in any table)
                    if head != Some(place) && head.is_some_and(|h| place_slot(&h, true) == at) {
                        crowded += 1;
                        if crowded > index.flows.len() / 8 + 16 {
                            return None;
                        }
                    }
                }
                next_at[i] = *slot;
                *slot = i as u32;
            }
        }
        Some(FlowsByPlace { first_at, mask, next_at, by_time })
    }

    /// The first flow of the chain that holds the flows at `place`.
    pub(crate) fn first(&self, place: &Place) -> Option<u32> {
        self.first_at
            .get((place_slot(place, self.by_time) & self.mask) as usize)
            .copied()
            .filter(|&f| f != NONE)
    }

    /// The flows at `place`.
    pub(crate) fn at<'a>(
        &'a self,
        index: &'a TraceIndex,
        place: Place,
        first: u32,
    ) -> impl Iterator<Item = usize> + 'a {
        let mut next = first;
        std::iter::from_fn(move || {
            while next != NONE {
                let f = next as usize;
                next = self.next_at[f];
                let flow = &index.flows[f];
                if flow.tid == place.0 && index.ts_key(Kept::Flow(f)) == Some(place.1) {
                    return Some(f);
                }
            }
            None
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::keys::Num;
    use crate::passes::tests::{ev, index};

    fn index_of(flows: &[(i64, f64)]) -> TraceIndex {
        index(&flows.iter().map(|&(tid, ts)| ev("ac2g", tid, ts, 0.0, None)).collect::<Vec<_>>())
    }

    fn found(index: &TraceIndex, table: &FlowsByPlace, tid: i64, ts: f64) -> Vec<usize> {
        let place = (index.keys.find(Key::Int(tid)).unwrap(), Key::from_num(Num::Float(ts)).unwrap());
        table.first(&place).map(|first| table.at(index, place, first).collect()).unwrap_or_default()
    }

    #[test]
    fn spread_places_are_laid_out_by_time_and_crowded_ones_hashed() {
        // microseconds apart: by time
        let spread: Vec<(i64, f64)> =
            (0..1000).map(|i| (7 + i % 2, 1000.5 + 3.0 * i as f64)).chain([(7, 1000.5)]).collect();
        let index = index_of(&spread);
        let table = FlowsByPlace::new(&index);
        assert!(table.by_time);
        assert_eq!(found(&index, &table, 7, 1000.5), vec![0, 1000]);
        assert_eq!(found(&index, &table, 8, 1003.5), vec![1]);
        assert!(found(&index, &table, 7, 1003.5).is_empty());
        // a trace in seconds: every place within a few whole units
        let crowded: Vec<(i64, f64)> = (0..1000).map(|i| (7, 1.0 + i as f64 * 1e-4)).collect();
        let index = index_of(&crowded);
        let table = FlowsByPlace::new(&index);
        assert!(!table.by_time);
        assert_eq!(found(&index, &table, 7, 1.0 + 500.0 * 1e-4), vec![500]);
    }
}
