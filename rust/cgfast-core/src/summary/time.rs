//! Time on the GPU: busy time as the union of kernel intervals, and each kernel's
//! share of it when kernels overlap.

/// A kernel's `[start, end)` in integer nanoseconds of the trace's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Interval {
    pub(crate) start: i64,
    pub(crate) end: i64,
}

/// Length of the union of `intervals` (sorted in place): the time at least one runs.
pub(crate) fn union_length(intervals: &mut [Interval]) -> i64 {
    intervals.sort_unstable_by_key(|i| i.start);
    let mut total = 0;
    let mut current: Option<Interval> = None;
    for &i in intervals.iter() {
        match current {
            Some(ref mut c) if i.start <= c.end => c.end = c.end.max(i.end),
            _ => {
                if let Some(c) = current {
                    total += c.end - c.start;
                }
                current = Some(i);
            }
        }
    }
    total + current.map_or(0, |c| c.end - c.start)
}

/// The busy time attributed to each interval: every instant covered by `n` intervals
/// gives `1/n` of itself to each of them. The results sum to [`union_length`], so
/// overlapping kernels are never counted twice.
pub(crate) fn attribute(intervals: &[Interval]) -> Vec<f64> {
    // (time, index, is_end); at one instant the order does not matter, since only
    // the time between distinct instants is shared out.
    let mut bounds: Vec<(i64, u32, bool)> = Vec::with_capacity(intervals.len() * 2);
    for (k, i) in intervals.iter().enumerate() {
        bounds.push((i.start, k as u32, false));
        bounds.push((i.end, k as u32, true));
    }
    bounds.sort_unstable_by_key(|b| b.0);
    // `shared` is ∫ 1/n(t) dt up to the current instant, over the time n(t) > 0; an
    // interval's attribution is its value at the end minus its value at the start.
    let mut attributed = vec![0.0; intervals.len()];
    let mut shared = 0.0f64;
    let mut active = 0u32;
    let mut last = bounds.first().map_or(0, |b| b.0);
    for (t, k, is_end) in bounds {
        if active > 0 {
            shared += (t - last) as f64 / active as f64;
        }
        last = t;
        if is_end {
            attributed[k as usize] += shared;
            active -= 1;
        } else {
            attributed[k as usize] -= shared;
            active += 1;
        }
    }
    attributed
}

/// Parse a JSON number of microseconds (as Kineto writes `ts` and `dur`) into
/// nanoseconds, exactly for up to three decimals.
pub(crate) fn micros_to_nanos(token: &[u8]) -> Option<i64> {
    let (negative, body) = match token.first()? {
        b'-' => (true, &token[1..]),
        _ => (false, token),
    };
    let dot = body.iter().position(|&b| b == b'.').unwrap_or(body.len());
    let (int_part, frac_part) = (&body[..dot], body.get(dot + 1..).unwrap_or(&[]));
    let exact = !int_part.is_empty()
        && int_part.len() <= 15
        && int_part.iter().all(u8::is_ascii_digit)
        && frac_part.iter().all(u8::is_ascii_digit)
        && (dot == body.len() || !frac_part.is_empty());
    if !exact {
        let micros: f64 = std::str::from_utf8(token).ok()?.parse().ok()?;
        let nanos = (micros * 1000.0).round();
        return (nanos.is_finite() && nanos.abs() < 9e18).then_some(nanos as i64);
    }
    let mut nanos: i64 = 0;
    for &d in int_part {
        nanos = nanos * 10 + (d - b'0') as i64;
    }
    for k in 0..3 {
        nanos = nanos * 10 + frac_part.get(k).map_or(0, |d| (d - b'0') as i64);
    }
    if frac_part.get(3).is_some_and(|&d| d >= b'5') {
        nanos += 1;
    }
    Some(if negative { -nanos } else { nanos })
}

/// Spread of a set of samples.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Spread {
    /// Samples.
    pub count: usize,
    /// The smallest.
    pub min: f64,
    /// The median.
    pub median: f64,
    /// The largest.
    pub max: f64,
    /// The mean.
    pub mean: f64,
    /// Population standard deviation.
    pub stdev: f64,
}

impl Spread {
    /// The spread of `samples` (sorted in place).
    pub fn of(samples: &mut [f64]) -> Spread {
        if samples.is_empty() {
            return Spread::default();
        }
        samples.sort_unstable_by(f64::total_cmp);
        let n = samples.len();
        let median = if n % 2 == 1 { samples[n / 2] } else { (samples[n / 2 - 1] + samples[n / 2]) / 2.0 };
        let mean = samples.iter().sum::<f64>() / n as f64;
        let variance = samples.iter().map(|s| (s - mean) * (s - mean)).sum::<f64>() / n as f64;
        Spread { count: n, min: samples[0], median, max: samples[n - 1], mean, stdev: variance.sqrt() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iv(start: i64, end: i64) -> Interval {
        Interval { start, end }
    }

    #[test]
    fn union_counts_overlaps_once() {
        assert_eq!(union_length(&mut []), 0);
        assert_eq!(union_length(&mut [iv(0, 10)]), 10);
        // Disjoint, touching, nested and partly overlapping, given out of order.
        assert_eq!(union_length(&mut [iv(20, 30), iv(0, 10)]), 20);
        assert_eq!(union_length(&mut [iv(10, 20), iv(0, 10)]), 20);
        assert_eq!(union_length(&mut [iv(0, 100), iv(10, 20), iv(30, 40)]), 100);
        assert_eq!(union_length(&mut [iv(5, 15), iv(0, 10), iv(40, 50), iv(12, 20)]), 30);
        assert_eq!(union_length(&mut [iv(0, 0), iv(3, 3)]), 0);
    }

    #[test]
    fn overlapping_time_is_split_among_the_kernels_running() {
        // A [0,10) and B [5,15): 5 alone each, 5 shared -> 7.5 each, 15 in all.
        assert_eq!(attribute(&[iv(0, 10), iv(5, 15)]), vec![7.5, 7.5]);
        // Three deep: [0,30), [10,20), [15,20): 0-10 A; 10-15 A,B; 15-20 A,B,C; 20-30 A.
        let got = attribute(&[iv(0, 30), iv(10, 20), iv(15, 20)]);
        let want = [10.0 + 2.5 + 5.0 / 3.0 + 10.0, 2.5 + 5.0 / 3.0, 5.0 / 3.0];
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-9, "{got:?}");
        }
        assert!((got.iter().sum::<f64>() - 30.0).abs() < 1e-9);
        // A gap stays unattributed; an empty interval gets nothing.
        assert_eq!(attribute(&[iv(0, 4), iv(10, 12), iv(11, 11)]), vec![4.0, 2.0, 0.0]);
        // Identical intervals share equally.
        assert_eq!(attribute(&[iv(0, 9), iv(0, 9), iv(0, 9)]), vec![3.0, 3.0, 3.0]);
    }

    #[test]
    fn attribution_sums_to_the_union() {
        let mut seed = 7u64;
        let mut next = || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) as i64
        };
        let mut intervals: Vec<Interval> = (0..500)
            .map(|_| {
                let s = next() % 100_000;
                iv(s, s + next() % 5_000)
            })
            .collect();
        let sum: f64 = attribute(&intervals).iter().sum();
        let union = union_length(&mut intervals);
        assert!((sum - union as f64).abs() < 1e-6 * union as f64, "{sum} vs {union}");
    }

    #[test]
    fn parses_microseconds_exactly() {
        assert_eq!(micros_to_nanos(b"5361804758596.525"), Some(5_361_804_758_596_525));
        assert_eq!(micros_to_nanos(b"12"), Some(12_000));
        assert_eq!(micros_to_nanos(b"1.5"), Some(1_500));
        assert_eq!(micros_to_nanos(b"0.0004"), Some(0));
        assert_eq!(micros_to_nanos(b"0.0005"), Some(1));
        assert_eq!(micros_to_nanos(b"-2.25"), Some(-2_250));
        assert_eq!(micros_to_nanos(b"1e3"), Some(1_000_000));
        assert_eq!(micros_to_nanos(b"NaN"), None);
        assert_eq!(micros_to_nanos(b"Infinity"), None);
    }

    #[test]
    fn spread_of_samples() {
        let s = Spread::of(&mut [4.0, 1.0, 3.0, 2.0]);
        assert_eq!((s.count, s.min, s.median, s.max, s.mean), (4, 1.0, 2.5, 4.0, 2.5));
        assert!((s.stdev - 1.25f64.sqrt()).abs() < 1e-12);
        assert_eq!(Spread::of(&mut [5.0, 1.0, 9.0]).median, 5.0);
        assert_eq!(Spread::of(&mut []), Spread::default());
    }
}
