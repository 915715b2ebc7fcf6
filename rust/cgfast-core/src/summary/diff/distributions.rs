//! The distribution functions the hierarchical bootstrap needs: the regularized
//! incomplete beta function (through the log-gamma function), which gives both the
//! distribution of the median of a resample (a binomial tail) and Student's t
//! quantile.

/// `ln Γ(x)` for `x > 0`: Lanczos' approximation (g = 7, 9 terms), about 15 digits.
fn ln_gamma(x: f64) -> f64 {
    const G: f64 = 7.0;
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // reflection: Γ(x) Γ(1 - x) = π / sin(πx)
        return (std::f64::consts::PI / (std::f64::consts::PI * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut sum = C[0];
    for (i, c) in C.iter().enumerate().skip(1) {
        sum += c / (x + i as f64);
    }
    let t = x + G + 0.5;
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + sum.ln()
}

/// The regularized incomplete beta function `I_x(a, b)` for `a, b > 0`: the continued
/// fraction (modified Lentz), on the side of `(a + 1) / (a + b + 2)` where it converges
/// fast.
pub(super) fn incomplete_beta(x: f64, a: f64, b: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let front = (ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln()).exp();
    if x < (a + 1.0) / (a + b + 2.0) {
        front * beta_fraction(x, a, b) / a
    } else {
        1.0 - front * beta_fraction(1.0 - x, b, a) / b
    }
}

fn beta_fraction(x: f64, a: f64, b: f64) -> f64 {
    const TINY: f64 = 1e-300;
    let (qab, qap, qam) = (a + b, a + 1.0, a - 1.0);
    let mut c = 1.0;
    let mut d = 1.0 - qab * x / qap;
    if d.abs() < TINY {
        d = TINY;
    }
    d = 1.0 / d;
    let mut h = d;
    for m in 1..10_000 {
        let m = m as f64;
        let m2 = 2.0 * m;
        for aa in
            [m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))]
        {
            d = 1.0 + aa * d;
            if d.abs() < TINY {
                d = TINY;
            }
            c = 1.0 + aa / c;
            if c.abs() < TINY {
                c = TINY;
            }
            d = 1.0 / d;
            h *= d * c;
        }
        if (d * c - 1.0).abs() < 1e-15 {
            break;
        }
    }
    h
}

/// The `p` quantile (`p` above 1/2) of Student's t distribution with `df` degrees of
/// freedom (any real `df >= 1`), by bisection on its distribution function
/// `F(t) = 1 - I_{df/(df+t²)}(df/2, 1/2) / 2`.
pub(super) fn student_t_quantile(p: f64, df: f64) -> f64 {
    let df = df.max(1.0);
    let upper_tail = |t: f64| 0.5 * incomplete_beta(df / (df + t * t), df / 2.0, 0.5);
    let (mut low, mut high) = (0.0f64, 1.0f64);
    while upper_tail(high) > 1.0 - p {
        high *= 2.0;
    }
    for _ in 0..200 {
        let mid = 0.5 * (low + high);
        if mid <= low || mid >= high {
            break;
        }
        if upper_tail(mid) > 1.0 - p {
            low = mid;
        } else {
            high = mid;
        }
    }
    high
}

/// For a run of `n` replays: the distribution of which of its sorted times is the median
/// of a resample (`n` replays drawn with replacement, the `⌈n/2⌉`-th smallest of them).
/// The resample holds at least `m = ⌈n/2⌉` draws among the `j` smallest times with the
/// binomial probability `P(Bin(n, j/n) >= m) = I_{j/n}(m, n - m + 1)`; so
/// `cumulative[j - 1]` is the chance that the median is one of the `j` smallest, and
/// drawing one uniform number picks a median exactly as resampling all `n` would.
pub(super) struct MedianRanks {
    cumulative: Vec<f64>,
}

impl MedianRanks {
    pub(super) fn new(n: usize) -> MedianRanks {
        let m = n.div_ceil(2) as f64;
        let b = n as f64 - m + 1.0;
        let mut cumulative: Vec<f64> = (1..n).map(|j| incomplete_beta(j as f64 / n as f64, m, b)).collect();
        cumulative.push(1.0);
        MedianRanks { cumulative }
    }

    /// The index (0-based, into the sorted times) of the median of a resample, for `u`
    /// uniform in `[0, 1)`.
    pub(super) fn pick(&self, u: f64) -> usize {
        self.cumulative.partition_point(|&c| c <= u).min(self.cumulative.len() - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_gamma_function_at_known_points() {
        // Γ(1) = Γ(2) = 1, Γ(1/2) = √π, Γ(10) = 9!
        assert!(ln_gamma(1.0).abs() < 1e-14 && ln_gamma(2.0).abs() < 1e-14);
        assert!((ln_gamma(0.5) - std::f64::consts::PI.sqrt().ln()).abs() < 1e-14);
        assert!((ln_gamma(10.0) - 362_880f64.ln()).abs() < 1e-12);
        assert!((ln_gamma(0.25) - 3.625_609_908_221_908_f64.ln()).abs() < 1e-13);
    }

    #[test]
    fn the_incomplete_beta_function_is_the_binomial_tail() {
        // I_p(m, n - m + 1) = P(Bin(n, p) >= m), summed term by term
        for (n, p) in [(1, 0.3), (5, 0.2), (6, 0.5), (20, 0.45), (101, 0.52)] {
            for m in 1..=n {
                let tail: f64 = (m..=n)
                    .map(|k| {
                        let ln_choose = ln_gamma(n as f64 + 1.0)
                            - ln_gamma(k as f64 + 1.0)
                            - ln_gamma((n - k) as f64 + 1.0);
                        (ln_choose + k as f64 * f64::ln(p) + (n - k) as f64 * f64::ln(1.0 - p)).exp()
                    })
                    .sum();
                let beta = incomplete_beta(p, m as f64, (n - m + 1) as f64);
                assert!((beta - tail).abs() < 1e-12, "n {n}, m {m}, p {p}: {beta} against {tail}");
            }
        }
        assert_eq!((incomplete_beta(0.0, 2.0, 3.0), incomplete_beta(1.0, 2.0, 3.0)), (0.0, 1.0));
    }

    #[test]
    fn student_t_quantiles_match_the_published_tables() {
        // two-sided 95%: the 0.975 quantile
        for (df, t) in [
            (1.0, 12.706),
            (2.0, 4.303),
            (3.0, 3.182),
            (4.0, 2.776),
            (6.0, 2.447),
            (10.0, 2.228),
            (30.0, 2.042),
            (1e6, 1.960),
        ] {
            let q = student_t_quantile(0.975, df);
            assert!((q - t).abs() < 5e-4, "df {df}: {q}, the table says {t}");
        }
        // df = 1 is the Cauchy distribution: tan(π (p - 1/2)); df = 2: (2p - 1) √(2 / (1 - (2p - 1)²))
        let cauchy = (std::f64::consts::PI * 0.475).tan();
        assert!((student_t_quantile(0.975, 1.0) - cauchy).abs() < 1e-9);
        let two = 0.95 * (2.0 / (1.0 - 0.95 * 0.95f64)).sqrt();
        assert!((student_t_quantile(0.975, 2.0) - two).abs() < 1e-9);
        // between whole degrees of freedom it lies between their quantiles
        let (q3, q35, q4) =
            (student_t_quantile(0.975, 3.0), student_t_quantile(0.975, 3.5), student_t_quantile(0.975, 4.0));
        assert!(q4 < q35 && q35 < q3);
    }

    /// Every one of the `n^n` resamples of `0..n`, its `⌈n/2⌉`-th smallest counted.
    fn median_counts(n: usize) -> Vec<u64> {
        let m = n.div_ceil(2);
        let mut counts = vec![0u64; n];
        let mut draw = vec![0usize; n];
        loop {
            let mut sorted = draw.clone();
            sorted.sort_unstable();
            counts[sorted[m - 1]] += 1;
            // the next resample, as an odometer
            let mut i = 0;
            while i < n && draw[i] == n - 1 {
                draw[i] = 0;
                i += 1;
            }
            if i == n {
                return counts;
            }
            draw[i] += 1;
        }
    }

    #[test]
    fn a_picked_median_is_distributed_as_a_resampled_one() {
        for n in 1..=7 {
            let counts = median_counts(n);
            let total = (n as f64).powi(n as i32);
            let ranks = MedianRanks::new(n);
            let mut below = 0.0;
            for (j, &c) in counts.iter().enumerate() {
                below += c as f64 / total;
                assert!((ranks.cumulative[j] - below).abs() < 1e-12, "n {n}, j {j}");
            }
            // the cumulative chances cut [0, 1) into the picks
            assert_eq!(ranks.pick(0.0), counts.iter().position(|&c| c > 0).unwrap());
            assert_eq!(ranks.pick(1.0 - 1e-16), n - 1 - counts.iter().rev().position(|&c| c > 0).unwrap());
        }
        // a large run: the median of a resample is the middle one give or take a normal
        // spread of √(n/4) / √n · n ≈ 22.4 ranks (0.1%: 3.09 of them, 69 ranks)
        let ranks = MedianRanks::new(2_001);
        assert_eq!(ranks.pick(0.5), 1_000);
        assert!(ranks.pick(0.001).abs_diff(1_000 - 69) <= 3, "{}", ranks.pick(0.001));
        assert!(ranks.pick(0.999).abs_diff(1_000 + 69) <= 3, "{}", ranks.pick(0.999));
    }
}
