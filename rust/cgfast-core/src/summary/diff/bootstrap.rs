//! How sure a change is when each side has several runs (traces of separate processes):
//! a hierarchical bootstrap. Replays of one process share its memory placement, cuBLAS
//! choices and clocks, so two runs of one program differ by more than their replays
//! do; the runs, not the replays, are the independent samples.
//!
//! A run's time per replay is the median of its replays (where a value is compared
//! graph by graph, the weighted mean of its per-graph medians); a side's, the mean over
//! its runs; the change, test minus base. Each of [`RESAMPLES`] resamples draws a side's
//! `k` runs with replacement, then each drawn run's replays with replacement (the
//! median of that resample picked directly, [`MedianRanks`]), and takes the side's mean
//! again. Resampling `k` runs from `k` understates the variance of their mean by
//! `(k - 1) / k`, and with a handful of runs a normal quantile is too narrow: the 95%
//! interval is the change ± Student's t (Welch–Satterthwaite degrees of freedom) times
//! the standard error, each side's resampled variance taken times `k / (k - 1)`.
//! Replay noise is counted twice (in the runs' medians and again in the replays
//! drawn), which makes the interval wider, never narrower, than it should be where the
//! runs agree.
//!
//! The generator starts from the same seed for every value, so a report is the same on
//! every run, on any number of threads.

use rustc_hash::FxHashMap as HashMap;

use super::distributions::{student_t_quantile, MedianRanks};
use crate::summary::diff_stats::{splitmix, Shift, CONFIDENCE};
use crate::summary::time::Spread;

/// Resamples per value.
pub const RESAMPLES: usize = 2_000;

/// The fewest runs a side needs for the interval to hold the spread between runs.
pub const MIN_RUNS: usize = 2;

const SEED: u64 = 0x6367_6661_7374_2121;

/// One run's replays of a value: per graph slot (one where the value is not compared
/// graph by graph), its times, sorted; empty where the run has none in that graph.
pub(super) type Run = Vec<Vec<f64>>;

/// A change between runs: the shift with its interval, and each side's time per replay
/// (the mean over its runs).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct RunShift {
    pub(super) shift: Shift,
    pub(super) locations: (f64, f64),
}

/// SplitMix64.
struct Generator(u64);

impl Generator {
    fn next(&mut self) -> u64 {
        splitmix(&mut self.0)
    }

    /// Uniform in `[0, 1)`.
    fn uniform(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `0..k` (the bias, `k / 2^64`, is nil for any number of runs).
    fn below(&mut self, k: usize) -> usize {
        ((self.next() as u128 * k as u128) >> 64) as usize
    }
}

/// Runs hierarchical bootstraps, keeping the median ranks it worked out for each run
/// length (the values of a diff share them).
#[derive(Default)]
pub(crate) struct Bootstrap {
    ranks: HashMap<usize, MedianRanks>,
}

/// A side's runs as the resampling reads them: per run, per graph slot, the times and
/// the median ranks of their count.
struct Side<'a> {
    runs: Vec<Vec<(&'a [f64], Option<&'a MedianRanks>)>>,
}

impl Bootstrap {
    /// The change of `test` against `base`, `weights` per graph slot (they sum to 1 over
    /// the slots the value is in); `None` unless each side has [`MIN_RUNS`] runs.
    pub(super) fn shift(&mut self, base: &[Run], test: &[Run], weights: &[f64]) -> Option<RunShift> {
        if base.len() < MIN_RUNS || test.len() < MIN_RUNS {
            return None;
        }
        for times in base.iter().chain(test).flatten() {
            if !times.is_empty() {
                self.ranks.entry(times.len()).or_insert_with(|| MedianRanks::new(times.len()));
            }
        }
        let side = |runs: &[Run]| runs.iter().map(|r| location(r, weights)).sum::<f64>() / runs.len() as f64;
        let (base_location, test_location) = (side(base), side(test));
        let resampled = |runs: &'_ [Run], rng: &mut Generator| -> Vec<f64> {
            let side = Side {
                runs: runs
                    .iter()
                    .map(|r| r.iter().map(|t| (t.as_slice(), self.ranks.get(&t.len()))).collect())
                    .collect(),
            };
            (0..RESAMPLES).map(|_| side.draw(weights, rng)).collect()
        };
        let mut rng = Generator(SEED);
        let base_draws = resampled(base, &mut rng);
        let test_draws = resampled(test, &mut rng);
        let variance = |draws: &[f64], k: usize| {
            let mean = draws.iter().sum::<f64>() / draws.len() as f64;
            let v = draws.iter().map(|d| (d - mean) * (d - mean)).sum::<f64>() / draws.len() as f64;
            v * k as f64 / (k - 1) as f64
        };
        let (vb, vt) = (variance(&base_draws, base.len()), variance(&test_draws, test.len()));
        let estimate = test_location - base_location;
        let half = if vb + vt > 0.0 {
            let df =
                (vb + vt).powi(2) / (vb * vb / (base.len() - 1) as f64 + vt * vt / (test.len() - 1) as f64);
            student_t_quantile(1.0 - (1.0 - CONFIDENCE) / 2.0, df) * (vb + vt).sqrt()
        } else {
            0.0
        };
        Some(RunShift {
            shift: Shift { estimate, low: estimate - half, high: estimate + half },
            locations: (base_location, test_location),
        })
    }
}

impl Side<'_> {
    /// One resample of the side's time per replay: `k` runs drawn with replacement, in
    /// each the median of its replays drawn with replacement.
    fn draw(&self, weights: &[f64], rng: &mut Generator) -> f64 {
        let k = self.runs.len();
        let mut sum = 0.0;
        for _ in 0..k {
            let run = &self.runs[rng.below(k)];
            let (mut located, mut weight) = (0.0, 0.0);
            for (&(times, ranks), &w) in run.iter().zip(weights) {
                if let Some(ranks) = ranks {
                    located += w * times[ranks.pick(rng.uniform())];
                    weight += w;
                }
            }
            sum += located / weight;
        }
        sum / k as f64
    }
}

/// A run's time per replay: the weighted mean, over the graph slots it has replays in,
/// of their medians.
fn location(run: &Run, weights: &[f64]) -> f64 {
    let (mut located, mut weight) = (0.0, 0.0);
    for (times, &w) in run.iter().zip(weights) {
        if !times.is_empty() {
            located += w * Spread::of(&mut times.clone()).median;
            weight += w;
        }
    }
    located / weight
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Noise that is the same on every run of the tests (not the bootstrap's generator:
    /// a fresh stream).
    struct Noise(Generator);

    impl Noise {
        fn new(seed: u64) -> Noise {
            Noise(Generator(seed ^ 0x5555_0000_aaaa))
        }

        fn normal(&mut self) -> f64 {
            let (u, v) = (self.0.uniform().max(1e-300), self.0.uniform());
            (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
        }

        /// A replay's time: a floor plus a long right tail, as GPU times are.
        fn replay(&mut self, run_us: f64, spread_us: f64) -> f64 {
            run_us
                + spread_us * self.normal().abs()
                + if self.0.uniform() < 0.05 { 8.0 * spread_us * self.0.uniform() } else { 0.0 }
        }

        /// `k` runs of `n` replays of a 100 µs value, each run placed `run_sd` (a share)
        /// off at random, `shift` (a share) added to all.
        fn runs(&mut self, k: usize, n: usize, run_sd: f64, spread_us: f64, shift: f64) -> Vec<Run> {
            (0..k)
                .map(|_| {
                    let run_us = 100.0 * (1.0 + shift + run_sd * self.normal());
                    let mut times: Vec<f64> = (0..n).map(|_| self.replay(run_us, spread_us)).collect();
                    times.sort_unstable_by(f64::total_cmp);
                    vec![times]
                })
                .collect()
        }
    }

    /// The share of `trials` intervals that hold the true change (none).
    fn coverage(seed: u64, trials: usize, k: usize, n: usize, run_sd: f64, spread_us: f64) -> f64 {
        let mut noise = Noise::new(seed);
        let mut bootstrap = Bootstrap::default();
        let held = (0..trials)
            .filter(|_| {
                let (base, test) =
                    (noise.runs(k, n, run_sd, spread_us, 0.0), noise.runs(k, n, run_sd, spread_us, 0.0));
                bootstrap.shift(&base, &test, &[1.0]).unwrap().shift.holds(0.0)
            })
            .count();
        held as f64 / trials as f64
    }

    #[test]
    fn intervals_hold_no_change_95_percent_of_the_time_where_runs_differ() {
        // Runs 2% apart (placement), replays 1 µs apart: the spread between runs is
        // what the interval must hold. 600 trials: a 95% rate lands within ±2.7 points
        // (3 standard errors); at 3 runs a side the corrections for few runs err on the
        // wide side, up to 99%.
        for (seed, k, low, high) in [(1, 3, 0.923, 0.99), (2, 4, 0.923, 0.977), (3, 8, 0.923, 0.977)] {
            let rate = coverage(seed, 600, k, 40, 0.02, 1.0);
            assert!((low..=high).contains(&rate), "{k} runs a side: {rate}");
        }
    }

    #[test]
    fn where_runs_agree_the_interval_is_wider_not_narrower() {
        // No placement effect, replay noise only: counted twice, so more than 95%.
        let rate = coverage(4, 400, 4, 30, 0.0, 3.0);
        assert!(rate >= 0.95, "{rate}");
    }

    #[test]
    fn a_real_change_lies_outside_the_interval() {
        // 4 runs a side, 2% placement, one side 15% slower: every interval above 0 and
        // holding 15 µs or near it
        let mut noise = Noise::new(5);
        let mut bootstrap = Bootstrap::default();
        for _ in 0..100 {
            let (base, test) = (noise.runs(4, 40, 0.02, 1.0, 0.0), noise.runs(4, 40, 0.02, 1.0, 0.15));
            let s = bootstrap.shift(&base, &test, &[1.0]).unwrap().shift;
            assert!(s.low > 5.0 && (s.estimate - 15.0).abs() < 5.0 && s.low < s.high, "{s:?}");
        }
    }

    #[test]
    fn the_estimate_is_the_change_of_the_mean_of_the_runs_medians() {
        let runs = |medians: &[f64]| -> Vec<Run> {
            medians.iter().map(|&m| vec![vec![m - 1.0, m, m + 5.0]]).collect()
        };
        let r = Bootstrap::default().shift(&runs(&[10.0, 12.0]), &runs(&[13.0, 14.0, 18.0]), &[1.0]).unwrap();
        assert_eq!(r.locations, (11.0, 15.0));
        assert_eq!(r.shift.estimate, 4.0);
        assert!(r.shift.low < 4.0 && r.shift.high > 4.0);
        // graph by graph: each run's medians weighted, over the graphs it has replays in
        let two = |a: f64, b: f64| vec![vec![a], vec![b]];
        let r = Bootstrap::default()
            .shift(
                &[two(10.0, 20.0), two(10.0, 20.0)],
                &[two(11.0, 20.0), vec![vec![11.0], vec![]]],
                &[0.5, 0.5],
            )
            .unwrap();
        assert_eq!(r.locations, (15.0, (15.5 + 11.0) / 2.0));
        // every time alike on each side: no spread, the interval is the change itself
        let alike = |us: f64, k: usize| -> Vec<Run> { vec![vec![vec![us; 4]]; k] };
        let r = Bootstrap::default().shift(&alike(7.0, 2), &alike(9.0, 3), &[1.0]).unwrap();
        assert_eq!((r.shift.low, r.shift.estimate, r.shift.high), (2.0, 2.0, 2.0));
        // one run on a side: no interval between runs
        assert_eq!(Bootstrap::default().shift(&runs(&[7.0]), &runs(&[9.0, 9.0]), &[1.0]), None);
    }

    #[test]
    fn the_same_runs_give_the_same_interval_whatever_came_before() {
        let mut noise = Noise::new(6);
        let (base, test) = (noise.runs(4, 25, 0.02, 1.0, 0.0), noise.runs(5, 31, 0.02, 1.0, 0.03));
        let first = Bootstrap::default().shift(&base, &test, &[1.0]).unwrap();
        let mut used = Bootstrap::default();
        let other = noise.runs(3, 77, 0.01, 2.0, 0.0);
        used.shift(&other, &base, &[1.0]);
        assert_eq!(used.shift(&base, &test, &[1.0]).unwrap(), first);
        assert_eq!(Bootstrap::default().shift(&base, &test, &[1.0]).unwrap(), first);
    }
}
