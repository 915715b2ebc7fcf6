//! How sure `cgfast diff` is of a change: the Hodges–Lehmann estimate of the shift
//! between two samples (the median of all differences `test - base` between a test
//! sample and a base sample) and its distribution-free 95% confidence interval, Moses'
//! interval from the Mann–Whitney U distribution: `[D(k), D(mn + 1 - k)]` of the sorted
//! differences, `k` from the exact distribution of U for small samples (`m·n ≤`
//! [`EXACT_UP_TO`]) and from its normal approximation, with the variance corrected for
//! ties, above. Its only assumption is that the two sides' samples are independent and
//! that the change shifts one distribution against the other; it needs no normality,
//! and the replays of a GPU program, with their long tails, are rarely normal.
//!
//! The `m·n` differences are never all stored: an order statistic of them is selected
//! in the implicit matrix they form over the two sorted samples (see `Differences`),
//! in about `O((m + n) log(m·n))`.

/// The confidence of every interval.
pub const CONFIDENCE: f64 = 0.95;

/// The standard normal quantile of `1 - (1 - CONFIDENCE) / 2`.
pub(crate) const Z: f64 = 1.959_963_984_540_054;

/// Samples this small (`m·n`) take `k` from the exact distribution of U.
pub(crate) const EXACT_UP_TO: usize = 2_500;

/// A shift of `test` against `base` and its interval, in the samples' unit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shift {
    /// The Hodges–Lehmann estimate.
    pub estimate: f64,
    /// The interval's low end; infinite where the samples are too few for a 95%
    /// interval (fewer than 4 on one side with 3 on the other, say).
    pub low: f64,
    /// Its high end, likewise.
    pub high: f64,
}

impl Shift {
    /// Whether the interval holds `x`.
    pub fn holds(&self, x: f64) -> bool {
        self.low <= x && x <= self.high
    }
}

/// Finds shifts, keeping the exact critical ranks it worked out for each pair of
/// sample sizes (many values of a diff share them).
#[derive(Default)]
pub(crate) struct ShiftFinder {
    exact: rustc_hash::FxHashMap<(usize, usize), Option<u64>>,
}

impl ShiftFinder {
    /// The shift of `test` against `base` (both sorted in place); `None` when either is empty.
    pub(crate) fn shift(&mut self, base: &mut [f64], test: &mut [f64]) -> Option<Shift> {
        if base.is_empty() || test.is_empty() {
            return None;
        }
        base.sort_unstable_by(f64::total_cmp);
        test.sort_unstable_by(f64::total_cmp);
        let differences = Differences { x: base, y: test };
        let mn = (base.len() * test.len()) as u64;
        let estimate = if mn % 2 == 1 {
            differences.kth(mn / 2 + 1)
        } else {
            (differences.kth(mn / 2) + differences.kth(mn / 2 + 1)) / 2.0
        };
        let (low, high) = match self.lowest_rank(base, test) {
            Some(k) => (differences.kth(k), differences.kth(mn + 1 - k)),
            None => (f64::NEG_INFINITY, f64::INFINITY),
        };
        Some(Shift { estimate, low, high })
    }

    /// The `k` of `D(k)`, the interval's lower end: the largest `k` with
    /// `P(U <= k - 1) <= (1 - CONFIDENCE) / 2` under no shift; `None` when even
    /// `P(U = 0)` is larger (too few samples).
    fn lowest_rank(&mut self, x: &[f64], y: &[f64]) -> Option<u64> {
        let (m, n) = (x.len(), y.len());
        if m * n <= EXACT_UP_TO {
            *self.exact.entry((m, n)).or_insert_with(|| exact_rank(m, n))
        } else {
            normal_rank(x, y)
        }
    }
}

/// The shift of `test` against `base` (both sorted in place), with a finder of its own.
#[cfg(test)]
pub(crate) fn shift(base: &mut [f64], test: &mut [f64]) -> Option<Shift> {
    ShiftFinder::default().shift(base, test)
}

fn exact_rank(m: usize, n: usize) -> Option<u64> {
    let alpha_half = (1.0 - CONFIDENCE) / 2.0;
    let mut cumulative = 0.0;
    let mut k = 0u64;
    for p in u_distribution(m, n) {
        cumulative += p;
        // a little slack for the rounding of the sums
        if cumulative > alpha_half * (1.0 + 1e-12) {
            break;
        }
        k += 1;
    }
    (k >= 1).then_some(k)
}

/// `k` from U's normal approximation with a continuity correction and the variance
/// corrected for ties: `P(U <= k - 1) ≈ Φ((k - 1/2 - mn/2) / σ)`.
fn normal_rank(x: &[f64], y: &[f64]) -> Option<u64> {
    let (m, n) = (x.len() as f64, y.len() as f64);
    let total = m + n;
    let ties = tie_term(x, y);
    let variance = m * n / 12.0 * ((total + 1.0) - ties / (total * (total - 1.0)));
    let k = (m * n / 2.0 + 0.5 - Z * variance.max(0.0).sqrt()).floor();
    (k >= 1.0).then_some(k as u64)
}

/// Σ (t³ - t) over the groups of tied values of both samples together (sorted).
fn tie_term(x: &[f64], y: &[f64]) -> f64 {
    let (mut i, mut j) = (0, 0);
    let mut sum = 0.0;
    while i < x.len() || j < y.len() {
        let v = match (x.get(i), y.get(j)) {
            (Some(&a), Some(&b)) => a.min(b),
            (Some(&a), None) => a,
            (None, Some(&b)) => b,
            (None, None) => unreachable!("one is left"),
        };
        let mut t = 0.0;
        while x.get(i) == Some(&v) {
            i += 1;
            t += 1.0;
        }
        while y.get(j) == Some(&v) {
            j += 1;
            t += 1.0;
        }
        sum += t * t * t - t;
    }
    sum
}

/// `P(U = u)` for `u` in `0..=m·n`, U the Mann–Whitney statistic of samples of `m` and
/// `n` with no shift and no ties: `P[m][n](u) = m/(m+n) P[m-1][n](u-n) + n/(m+n) P[m][n-1](u)`
/// (the largest of the `m + n` values is one of the `m`, above all `n` others, or one of
/// the `n`), row by row.
pub(crate) fn u_distribution(m: usize, n: usize) -> Vec<f64> {
    // previous[j]: P[i-1][j]; current[j]: P[i][j]
    let mut previous: Vec<Vec<f64>> = (0..=n).map(|_| vec![1.0]).collect();
    for i in 1..=m {
        let mut current: Vec<Vec<f64>> = Vec::with_capacity(n + 1);
        current.push(vec![1.0]);
        for j in 1..=n {
            let mut p = vec![0.0; i * j + 1];
            let (a, b) = (i as f64 / (i + j) as f64, j as f64 / (i + j) as f64);
            for (u, &q) in previous[j].iter().enumerate() {
                p[u + j] += a * q;
            }
            for (u, &q) in current[j - 1].iter().enumerate() {
                p[u] += b * q;
            }
            current.push(p);
        }
        previous = current;
    }
    previous.pop().expect("n + 1 rows")
}

/// The `m·n` differences `y[j] - x[i]` of two sorted samples, never written out.
struct Differences<'a> {
    x: &'a [f64],
    y: &'a [f64],
}

impl Differences<'_> {
    /// The `k`-th smallest difference (1-based), by selection in the implicit matrix of
    /// differences (Monahan's way of finding the Hodges–Lehmann estimate): row `j` holds
    /// `y[j] - x[i]`, falling as `i` grows. Each row keeps an active range `a[j]..b[j]`
    /// that holds the answer; a pivot drawn from the active differences is counted
    /// against (two pointers over the sorted samples, `O(m + n)`) and the side of it that
    /// cannot hold the answer dropped, as quickselect does, until few enough are left to
    /// select among directly. The pivots are drawn from a generator seeded by the
    /// arguments, so a run is repeatable (the answer is exact whatever is drawn).
    fn kth(&self, k: u64) -> f64 {
        let (x, y) = (self.x, self.y);
        let (m, n) = (x.len(), y.len());
        let mut a = vec![0usize; n];
        let mut b = vec![m; n];
        let mut seed = k ^ (m as u64) << 32 ^ n as u64;
        loop {
            let active: usize = a.iter().zip(&b).map(|(a, b)| b - a).sum();
            // differences dropped as smaller than the answer
            let below: u64 = b.iter().map(|&b| (m - b) as u64).sum();
            let rank = (k - below) as usize;
            if active <= 2 * (m + n) {
                let mut left: Vec<f64> =
                    (0..n).flat_map(|j| (a[j]..b[j]).map(move |i| y[j] - x[i])).collect();
                let (_, kth, _) = left.select_nth_unstable_by(rank - 1, f64::total_cmp);
                return *kth;
            }
            let mut draw = (splitmix(&mut seed) % active as u64) as usize;
            let mut row = 0;
            while draw >= b[row] - a[row] {
                draw -= b[row] - a[row];
                row += 1;
            }
            let pivot = y[row] - x[a[row] + draw];
            // per row, the first i with y[j] - x[i] <= pivot (at_most) and < pivot (below)
            let (mut at_most, mut under) = (0u64, 0u64);
            let (mut s, mut u) = (0usize, 0usize);
            let (mut firsts_le, mut firsts_lt) = (Vec::with_capacity(n), Vec::with_capacity(n));
            for &yj in y {
                while s < m && yj - x[s] > pivot {
                    s += 1;
                }
                while u < m && yj - x[u] >= pivot {
                    u += 1;
                }
                at_most += (m - s) as u64;
                under += (m - u) as u64;
                firsts_le.push(s);
                firsts_lt.push(u);
            }
            if under < k && k <= at_most {
                return pivot;
            }
            if k <= under {
                // the answer is below the pivot: drop every difference at or above it
                for (a, &u) in a.iter_mut().zip(&firsts_lt) {
                    *a = (*a).max(u);
                }
            } else {
                for (b, &s) in b.iter_mut().zip(&firsts_le) {
                    *b = (*b).min(s);
                }
            }
            for (a, b) in a.iter_mut().zip(&mut b) {
                *a = (*a).min(*b);
            }
        }
    }
}

/// SplitMix64's next number.
pub(crate) fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SplitMix64: a seeded generator, so that every run of the tests draws the same samples.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            splitmix(&mut self.0)
        }

        fn uniform(&mut self) -> f64 {
            (self.next() >> 11) as f64 / (1u64 << 53) as f64
        }

        fn normal(&mut self) -> f64 {
            let (u, v) = (self.uniform().max(1e-300), self.uniform());
            (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
        }

        /// A replay's time: a floor plus a long right tail, as GPU times are.
        fn replay_us(&mut self) -> f64 {
            100.0
                + 3.0 * self.normal().abs()
                + if self.uniform() < 0.05 { 40.0 * self.uniform() } else { 0.0 }
        }
    }

    fn all_differences(x: &[f64], y: &[f64]) -> Vec<f64> {
        let mut d: Vec<f64> = y.iter().flat_map(|b| x.iter().map(move |a| b - a)).collect();
        d.sort_unstable_by(f64::total_cmp);
        d
    }

    #[test]
    fn order_statistics_of_the_differences_are_exact() {
        let mut rng = Rng(1);
        for case in 0..200 {
            let m = 1 + (rng.next() % 17) as usize;
            let n = 1 + (rng.next() % 23) as usize;
            // integers (many ties) in some cases, negative and zero values in others
            let draw = |rng: &mut Rng| {
                if case % 3 == 0 {
                    (rng.next() % 7) as f64
                } else {
                    rng.normal() * 10.0
                }
            };
            let mut x: Vec<f64> = (0..m).map(|_| draw(&mut rng)).collect();
            let mut y: Vec<f64> = (0..n).map(|_| draw(&mut rng)).collect();
            x.sort_unstable_by(f64::total_cmp);
            y.sort_unstable_by(f64::total_cmp);
            let all = all_differences(&x, &y);
            let d = Differences { x: &x, y: &y };
            for k in 1..=all.len() as u64 {
                assert_eq!(d.kth(k), all[k as usize - 1], "case {case}, k {k}");
            }
        }
    }

    #[test]
    fn order_statistics_of_many_differences_are_exact() {
        // Large enough for the selection to take several pivots before it enumerates.
        let mut rng = Rng(2);
        for (case, (m, n)) in [(300, 200), (1000, 37), (64, 900), (500, 500)].into_iter().enumerate() {
            let draw = |rng: &mut Rng| {
                if case % 2 == 1 {
                    (rng.next() % 13) as f64
                } else {
                    rng.replay_us()
                }
            };
            let mut x: Vec<f64> = (0..m).map(|_| draw(&mut rng)).collect();
            let mut y: Vec<f64> = (0..n).map(|_| draw(&mut rng)).collect();
            x.sort_unstable_by(f64::total_cmp);
            y.sort_unstable_by(f64::total_cmp);
            let all = all_differences(&x, &y);
            let d = Differences { x: &x, y: &y };
            let mn = all.len() as u64;
            let mut ranks = vec![1, 2, mn / 2, mn / 2 + 1, mn - 1, mn];
            ranks.extend((0..40).map(|_| 1 + rng.next() % mn));
            for k in ranks {
                assert_eq!(d.kth(k), all[k as usize - 1], "{m} x {n}, k {k}");
            }
        }
    }

    #[test]
    fn the_estimate_is_the_median_of_the_differences() {
        let s = shift(&mut [1.0, 2.0, 3.0], &mut [2.0, 5.0]).unwrap();
        // differences: 1 0 -1 4 3 2 -> median of -1 0 1 2 3 4 is 1.5
        assert_eq!(s.estimate, 1.5);
        assert_eq!((s.low, s.high), (f64::NEG_INFINITY, f64::INFINITY), "too few for 95%");
        assert_eq!(shift(&mut [], &mut [1.0]), None);
        let same = shift(&mut [4.0; 30], &mut [4.0; 25]).unwrap();
        assert_eq!((same.estimate, same.low, same.high), (0.0, 0.0, 0.0));
        let step = shift(&mut [4.0; 30], &mut [5.5; 25]).unwrap();
        assert_eq!((step.estimate, step.low, step.high), (1.5, 1.5, 1.5));
    }

    #[test]
    fn the_exact_distribution_is_the_count_of_orderings() {
        // Every way of placing m x's among m + n values, equally likely: U counts the
        // pairs with the x above the y.
        for (m, n) in [(1, 1), (2, 3), (3, 4), (4, 4), (5, 2)] {
            let mut counts = vec![0u64; m * n + 1];
            for mask in 0u32..1 << (m + n) {
                if mask.count_ones() as usize != m {
                    continue;
                }
                let (mut u, mut ys_below) = (0, 0);
                for bit in 0..m + n {
                    if mask >> bit & 1 == 1 {
                        u += ys_below;
                    } else {
                        ys_below += 1;
                    }
                }
                counts[u] += 1;
            }
            let total: u64 = counts.iter().sum();
            let p = u_distribution(m, n);
            for (u, &c) in counts.iter().enumerate() {
                assert!((p[u] - c as f64 / total as f64).abs() < 1e-12, "{m} {n} {u}");
            }
        }
    }

    #[test]
    fn critical_values_match_the_published_tables() {
        // Two-sided 5% critical values of U (reject when U <= c): k = c + 1.
        let rank = exact_rank;
        assert_eq!(rank(10, 10), Some(24)); // c = 23
        assert_eq!(rank(5, 5), Some(3)); // c = 2
        assert_eq!(rank(8, 12), Some(23)); // c = 22
        assert_eq!(rank(20, 20), Some(128)); // c = 127
        assert_eq!(rank(3, 3), None);
        assert_eq!(rank(4, 4), Some(1)); // c = 0
                                         // Where the normal approximation takes over it agrees with the exact rank.
        let distinct = |m: usize, from: usize| (from..from + m).map(|v| v as f64).collect::<Vec<_>>();
        for (m, n) in [(50, 50), (30, 80), (25, 100)] {
            let exact = rank(m, n).unwrap();
            let normal = normal_rank(&distinct(m, 0), &distinct(n, 1000)).unwrap();
            assert!(exact.abs_diff(normal) <= 1, "{m} x {n}: exact {exact}, normal {normal}");
        }
    }

    /// Draws `trials` pairs of samples of the same distribution, `shift` added to the
    /// test side: the share of intervals that hold the true shift, and the mean estimate.
    fn coverage(seed: u64, trials: usize, m: usize, n: usize, true_shift: f64) -> (f64, f64) {
        let mut rng = Rng(seed);
        let mut finder = ShiftFinder::default();
        let mut held = 0;
        let mut estimates = 0.0;
        for _ in 0..trials {
            let mut x: Vec<f64> = (0..m).map(|_| rng.replay_us()).collect();
            let mut y: Vec<f64> = (0..n).map(|_| rng.replay_us() + true_shift).collect();
            let s = finder.shift(&mut x, &mut y).unwrap();
            held += s.holds(true_shift) as usize;
            estimates += s.estimate;
        }
        (held as f64 / trials as f64, estimates / trials as f64)
    }

    #[test]
    fn intervals_hold_the_true_shift_95_percent_of_the_time() {
        // 2,000 trials: a 95% rate lands within ±1.5 points (3 standard errors).
        // Exact k (m·n <= 2,500), normal k, unequal sizes, no shift and a known one.
        for (seed, m, n, true_shift) in
            [(11, 12, 9, 0.0), (12, 40, 25, 0.0), (13, 80, 120, 0.0), (14, 30, 30, 2.5), (15, 150, 60, -4.0)]
        {
            let (rate, mean) = coverage(seed, 2_000, m, n, true_shift);
            assert!((0.935..=0.965).contains(&rate), "{m} x {n}, shift {true_shift}: {rate}");
            assert!((mean - true_shift).abs() < 0.1, "{m} x {n}: mean estimate {mean} for {true_shift}");
        }
    }

    #[test]
    fn a_real_shift_is_told_from_none() {
        // 40 replays a side, a 3% slowdown of a 100 µs value with ~3 µs of noise:
        // nearly every interval lies above 0.
        let mut rng = Rng(21);
        let mut finder = ShiftFinder::default();
        let mut above = 0;
        for _ in 0..500 {
            let mut x: Vec<f64> = (0..40).map(|_| rng.replay_us()).collect();
            let mut y: Vec<f64> = (0..40).map(|_| rng.replay_us() * 1.03).collect();
            above += (finder.shift(&mut x, &mut y).unwrap().low > 0.0) as usize;
        }
        assert!(above >= 490, "{above} of 500");
    }

    #[test]
    fn ties_keep_the_interval_honest() {
        // Times on a 1 µs grid (a few distinct values, ties everywhere): the closed
        // interval of whole differences is conservative, never below 95%, and a real
        // 2 µs shift still lies outside 0.
        let mut rng = Rng(31);
        let mut finder = ShiftFinder::default();
        let (mut held, mut detected) = (0, 0);
        for _ in 0..1_000 {
            let mut x: Vec<f64> = (0..90).map(|_| rng.replay_us().round()).collect();
            let mut y: Vec<f64> = (0..70).map(|_| rng.replay_us().round()).collect();
            held += finder.shift(&mut x, &mut y).unwrap().holds(0.0) as usize;
            let mut y: Vec<f64> = (0..70).map(|_| (rng.replay_us() + 2.0).round()).collect();
            detected += (finder.shift(&mut x, &mut y).unwrap().low > 0.0) as usize;
        }
        assert!(held >= 950, "{held} of 1000 hold no shift");
        assert!(detected >= 950, "{detected} of 1000 see the shift");
    }
}
