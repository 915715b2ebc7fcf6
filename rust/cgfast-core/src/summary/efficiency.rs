//! How close each value's kernels come to the GPU's roofline, from the FLOP and byte
//! counts the kernels carry (`args.flops`, `args.bytes`, written at capture).
//!
//! Per value, over its kernels that carry counts (its *counted* kernels): achieved
//! throughput is their FLOPs and bytes over their attributed time; the roofline bound is
//! `max(Σ flops / peak_flops(dtype), Σ bytes / peak_bandwidth)`; the share of peak is
//! the bound over the time, and the time above the roofline is the time less the bound.
//! A value whose kernels carry no counts has times only; `coverage` says how much of
//! its time the figures cover.

use serde_json::{json, Value as Json};

use super::peaks::{self, DtypeClass, GpuPeaks};
use super::read::Counts;
use super::Summary;

/// The counted kernels of a value.
#[derive(Clone, Debug, Default)]
pub struct CountTotals {
    /// Kernels with counts.
    pub kernels: u64,
    /// Their attributed time, in nanoseconds.
    pub attributed_ns: f64,
    /// Replays they appear in (distinct correlations, summed over traces).
    pub replays: u64,
    /// Σ bytes.
    pub bytes: f64,
    /// Σ FLOPs by the kernels' `args.dtype` (`None`: none given).
    pub flops_by_dtype: Vec<(Option<String>, f64)>,
}

impl CountTotals {
    pub(crate) fn add_kernel(&mut self, counts: Counts, dtype: Option<&str>, attributed_ns: f64) {
        self.kernels += 1;
        self.attributed_ns += attributed_ns;
        self.bytes += counts.bytes;
        self.add_flops(dtype, counts.flops);
    }

    fn add_flops(&mut self, dtype: Option<&str>, flops: f64) {
        match self.flops_by_dtype.iter_mut().find(|(d, _)| d.as_deref() == dtype) {
            Some((_, sum)) => *sum += flops,
            None => self.flops_by_dtype.push((dtype.map(str::to_string), flops)),
        }
    }

    pub(crate) fn merge(&mut self, other: CountTotals) {
        self.kernels += other.kernels;
        self.attributed_ns += other.attributed_ns;
        self.replays += other.replays;
        self.bytes += other.bytes;
        for (dtype, flops) in other.flops_by_dtype {
            self.add_flops(dtype.as_deref(), flops);
        }
    }

    /// Σ FLOPs.
    pub fn flops(&self) -> f64 {
        self.flops_by_dtype.iter().map(|(_, f)| f).sum::<f64>() + 0.0
    }
}

/// Peaks given on the command line (or by the Python call), over the table's.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PeakOverride {
    /// TFLOP/s, for every dtype.
    pub tflops: Option<f64>,
    /// GB/s.
    pub gbps: Option<f64>,
}

/// The peaks the figures are measured against.
#[derive(Clone, Debug, PartialEq)]
struct Peaks {
    table: Option<GpuPeaks>,
    over: PeakOverride,
}

impl Peaks {
    fn tflops(&self, class: DtypeClass) -> Option<f64> {
        self.over.tflops.or_else(|| self.table.and_then(|t| t.tflops(class)))
    }

    fn gbps(&self) -> Option<f64> {
        self.over.gbps.or_else(|| self.table.map(|t| t.gbps))
    }

    /// The roofline bound of `c`'s kernels, in nanoseconds; `None` where a peak it
    /// needs is unknown.
    fn bound_ns(&self, c: &CountTotals) -> Option<f64> {
        let mut flop_ns = 0.0;
        for (dtype, flops) in c.flops_by_dtype.iter().filter(|(_, f)| *f > 0.0) {
            let class = match dtype {
                Some(d) => DtypeClass::of(d)?,
                None => DtypeClass::DEFAULT,
            };
            flop_ns += flops / (self.tflops(class)? * 1e3);
        }
        let byte_ns = if c.bytes > 0.0 { c.bytes / self.gbps()? } else { 0.0 };
        Some(f64::max(flop_ns, byte_ns))
    }
}

/// One value's line of the efficiency report.
#[derive(Clone, Debug, PartialEq)]
pub struct EfficiencyRow {
    /// The value (`None`: kernels without the key).
    pub value: Option<String>,
    /// Its kernels.
    pub kernels: u64,
    /// Of them, those with counts.
    pub counted_kernels: u64,
    /// Its attributed time, in microseconds.
    pub attributed_us: f64,
    /// That of its counted kernels.
    pub counted_us: f64,
    /// counted / attributed, 0..1.
    pub coverage: f64,
    /// Σ FLOPs of its counted kernels per replay they appear in (`None`: no counts).
    pub flops_per_replay: Option<f64>,
    /// Σ bytes, likewise.
    pub bytes_per_replay: Option<f64>,
    /// FLOPs over the counted time, in TFLOP/s.
    pub tflops: Option<f64>,
    /// Bytes over the counted time, in GB/s.
    pub gbps: Option<f64>,
    /// FLOPs per byte.
    pub intensity: Option<f64>,
    /// The counted kernels' roofline bound, in microseconds (`None`: a peak unknown).
    pub bound_us: Option<f64>,
    /// bound / counted time: the share of the GPU's peak reached, 0..1.
    pub peak_fraction: Option<f64>,
    /// counted time − bound, in microseconds.
    pub above_roofline_us: Option<f64>,
}

/// The efficiency report: the peaks used, notes on what the figures lack, and a row
/// per value, the most time above the roofline first.
#[derive(Clone, Debug, PartialEq)]
pub struct Efficiency {
    /// The GPU names the traces record (`deviceProperties`), each once.
    pub devices: Vec<String>,
    /// The table's entry for them, where there is one.
    pub gpu: Option<&'static str>,
    /// The FLOP peak per dtype class, in TFLOP/s, where known.
    pub peak_tflops: Vec<(DtypeClass, f64)>,
    /// The bandwidth peak, in GB/s.
    pub peak_gbps: Option<f64>,
    /// Share of the busy time attributed to kernels with counts.
    pub coverage: f64,
    /// What the figures lack, in sentences.
    pub notes: Vec<String>,
    /// A row per value.
    pub rows: Vec<EfficiencyRow>,
}

const CLASSES: [DtypeClass; 4] = [DtypeClass::Bf16, DtypeClass::Tf32, DtypeClass::Fp32, DtypeClass::Fp8];

fn positive(x: f64) -> Option<f64> {
    (x > 0.0).then_some(x)
}

impl Summary {
    /// The efficiency report against the peaks of the GPU the traces record, or `over`.
    pub fn efficiency(&self, over: PeakOverride) -> Efficiency {
        let mut devices: Vec<String> = self.traces.iter().flat_map(|t| t.gpu_names.iter().cloned()).collect();
        devices.sort();
        devices.dedup();
        let mut notes = Vec::new();
        let table = match devices.as_slice() {
            [one] => peaks::of_device(one),
            _ => None,
        };
        let needs_table = over.tflops.is_none() || over.gbps.is_none();
        if needs_table && table.is_none() {
            let why = match devices.as_slice() {
                [] => "the traces record no GPU (deviceProperties)".to_string(),
                [one] => format!("cgfast has no peaks for the GPU the traces record ({one})"),
                many => format!("the traces record different GPUs ({})", many.join(", ")),
            };
            notes.push(format!(
                "{why}: no share of peak nor roofline; give --peak-tflops and --peak-gbps for them"
            ));
        }
        let peaks = Peaks { table, over };

        let busy = self.busy_ns() as f64;
        let counted_ns: f64 = self.values.values().map(|t| t.counted.attributed_ns).sum::<f64>() + 0.0;
        let coverage = if busy > 0.0 { (counted_ns / busy).min(1.0) } else { 0.0 };
        if counted_ns == 0.0 && self.values.values().all(|t| t.counted.kernels == 0) {
            notes.insert(
                0,
                "no graphed kernel carries FLOP or byte counts (args.flops, args.bytes; annotate with flops=True): times only"
                    .to_string(),
            );
        } else if coverage < 1.0 {
            notes.push(format!(
                "kernels with counts take {:.1}% of the busy time: each value's figures are over its kernels with counts (its coverage)",
                coverage * 100.0 + 0.0
            ));
        }
        let mut dtypes: Vec<Option<&str>> = self
            .values
            .values()
            .flat_map(|t| {
                t.counted.flops_by_dtype.iter().filter(|(_, f)| *f > 0.0).map(|(d, _)| d.as_deref())
            })
            .collect();
        dtypes.sort();
        dtypes.dedup();
        if dtypes.contains(&None) && over.tflops.is_none() {
            notes.push(format!(
                "FLOPs of kernels without args.dtype are measured against the {} tensor-core peak",
                DtypeClass::DEFAULT.name()
            ));
        }
        for dtype in dtypes.into_iter().flatten() {
            let known = DtypeClass::of(dtype).and_then(|c| peaks.tflops(c)).is_some();
            if !known && (peaks.table.is_some() || over.tflops.is_some()) {
                notes.push(format!("no FLOP peak for dtype {dtype}: values with such FLOPs get no roofline"));
            }
        }

        let mut rows: Vec<EfficiencyRow> = self
            .values
            .iter()
            .map(|(value, t)| {
                let c = &t.counted;
                let per_replay = |x: f64| (c.replays > 0).then(|| x / c.replays as f64);
                let counted = positive(c.attributed_ns);
                let bound = if c.kernels > 0 { peaks.bound_ns(c) } else { None };
                EfficiencyRow {
                    value: value.clone(),
                    kernels: t.kernels,
                    counted_kernels: c.kernels,
                    attributed_us: t.attributed_ns / 1e3,
                    counted_us: c.attributed_ns / 1e3,
                    coverage: if t.attributed_ns > 0.0 {
                        (c.attributed_ns / t.attributed_ns).min(1.0)
                    } else {
                        0.0
                    },
                    flops_per_replay: per_replay(c.flops()),
                    bytes_per_replay: per_replay(c.bytes),
                    tflops: counted.map(|ns| c.flops() / ns / 1e3),
                    gbps: counted.map(|ns| c.bytes / ns),
                    intensity: positive(c.bytes).map(|b| c.flops() / b),
                    bound_us: bound.map(|b| b / 1e3),
                    peak_fraction: bound.zip(counted).map(|(b, ns)| b / ns),
                    above_roofline_us: bound.zip(counted).map(|(b, ns)| (ns - b) / 1e3),
                }
            })
            .collect();
        rows.sort_by(|a, b| {
            let above = |r: &EfficiencyRow| r.above_roofline_us.unwrap_or(f64::NEG_INFINITY);
            above(b)
                .total_cmp(&above(a))
                .then_with(|| b.attributed_us.total_cmp(&a.attributed_us))
                .then_with(|| a.value.cmp(&b.value))
        });
        Efficiency {
            devices,
            gpu: table.map(|t| t.gpu),
            peak_tflops: CLASSES.iter().filter_map(|&c| peaks.tflops(c).map(|p| (c, p))).collect(),
            peak_gbps: peaks.gbps(),
            coverage,
            notes,
            rows,
        }
    }
}

impl EfficiencyRow {
    /// The row as `--format json` and CSV write it.
    pub fn to_json(&self) -> Json {
        json!({
            "value": self.value,
            "kernels": self.kernels,
            "counted_kernels": self.counted_kernels,
            "attributed_us": self.attributed_us,
            "counted_us": self.counted_us,
            "coverage": self.coverage,
            "flops_per_replay": self.flops_per_replay,
            "bytes_per_replay": self.bytes_per_replay,
            "tflops": self.tflops,
            "gbps": self.gbps,
            "intensity": self.intensity,
            "bound_us": self.bound_us,
            "peak_fraction": self.peak_fraction,
            "above_roofline_us": self.above_roofline_us,
        })
    }
}

impl Efficiency {
    /// The report as the `efficiency` member of `--format json`.
    pub fn to_json(&self) -> Json {
        json!({
            "devices": self.devices,
            "gpu": self.gpu,
            "peak_tflops": self.peak_tflops.iter().map(|(c, p)| (c.name().to_string(), json!(p))).collect::<serde_json::Map<_, _>>(),
            "peak_gbps": self.peak_gbps,
            "default_dtype": DtypeClass::DEFAULT.name(),
            "coverage": self.coverage,
            "notes": self.notes,
            "rows": self.rows.iter().map(EfficiencyRow::to_json).collect::<Vec<_>>(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::summary::{summarize_file, SummaryOptions};
    use crate::CancelToken;

    /// On an H100 SXM (989.4 TFLOP/s bf16, 67 fp32, 3350 GB/s), two replays, µs:
    /// `a` a GEMM of 49.47 GFLOP in 100 µs each (half the bf16 peak; bound 50 µs);
    /// `b` a copy of 167.5 MB in 100 µs plus an fp32 kernel of 0.67 GFLOP in 20 µs
    /// (bound: max(10 µs fp32, 50 µs bytes) per replay); `c` without counts.
    const TRACE: &str = r#"{"deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}], "traceEvents": [
      {"cat": "kernel", "name": "gemm", "pid": 0, "ts": 0, "dur": 100, "args": {"graph node id": 1, "correlation": 1, "module": "a", "flops": "49470000000", "bytes": "1000"}},
      {"cat": "kernel", "name": "copy", "pid": 0, "ts": 100, "dur": 100, "args": {"graph node id": 2, "correlation": 1, "module": "b", "bytes": "167500000"}},
      {"cat": "kernel", "name": "f32", "pid": 0, "ts": 200, "dur": 20, "args": {"graph node id": 3, "correlation": 1, "module": "b", "flops": 670000000, "dtype": "torch.float32"}},
      {"cat": "kernel", "name": "other", "pid": 0, "ts": 220, "dur": 80, "args": {"graph node id": 4, "correlation": 1, "module": "c"}},
      {"cat": "kernel", "name": "gemm", "pid": 0, "ts": 1000, "dur": 100, "args": {"graph node id": 1, "correlation": 2, "module": "a", "flops": "49470000000", "bytes": "1000"}},
      {"cat": "kernel", "name": "copy", "pid": 0, "ts": 1100, "dur": 100, "args": {"graph node id": 2, "correlation": 2, "module": "b", "bytes": "167500000"}},
      {"cat": "kernel", "name": "f32", "pid": 0, "ts": 1200, "dur": 20, "args": {"graph node id": 3, "correlation": 2, "module": "b", "flops": 670000000, "dtype": "torch.float32"}},
      {"cat": "kernel", "name": "other", "pid": 0, "ts": 1220, "dur": 80, "args": {"graph node id": 4, "correlation": 2, "module": "c"}}
    ]}"#;

    fn summary_of(text: &str) -> Summary {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.json");
        std::fs::write(&path, text).unwrap();
        let options = SummaryOptions { by: "module".into(), ..SummaryOptions::default() };
        summarize_file(&path, &options, &CancelToken::new(), &mut |_, _| {}).unwrap()
    }

    fn close(a: Option<f64>, b: f64) -> bool {
        a.is_some_and(|a| (a - b).abs() < 1e-6 * b.abs().max(1.0))
    }

    #[test]
    fn figures_per_value_against_the_gpus_peaks() {
        let e = summary_of(TRACE).efficiency(PeakOverride::default());
        assert_eq!(
            (e.gpu, e.devices.as_slice()),
            (Some("H100 SXM"), &["NVIDIA H100 80GB HBM3".to_string()][..])
        );
        let values: Vec<Option<&str>> = e.rows.iter().map(|r| r.value.as_deref()).collect();
        // a: 200 - 100 µs above the roofline; b: 240 - 100; c: no counts, last.
        assert_eq!(values, [Some("b"), Some("a"), Some("c")]);
        let (b, a, c) = (&e.rows[0], &e.rows[1], &e.rows[2]);
        assert!(close(a.flops_per_replay, 49.47e9) && close(a.tflops, 494.7) && close(a.bound_us, 100.0));
        assert!(close(a.peak_fraction, 0.5) && close(a.above_roofline_us, 100.0));
        assert!(close(b.bytes_per_replay, 167.5e6) && close(b.flops_per_replay, 0.67e9));
        assert!(
            close(b.gbps, 335e6 / 240e3) && close(b.bound_us, 100.0) && close(b.above_roofline_us, 140.0)
        );
        assert!(close(b.intensity, 0.67e9 / 167.5e6));
        assert_eq!((c.counted_kernels, c.tflops, c.peak_fraction, c.coverage), (0, None, None, 0.0));
        assert!((e.coverage - 440.0 / 600.0).abs() < 1e-9);
        assert!(e.notes.iter().any(|n| n.contains("73.3% of the busy time")), "{:?}", e.notes);
        assert!(e.notes.iter().any(|n| n.contains("without args.dtype")), "{:?}", e.notes);
    }

    #[test]
    fn an_unknown_gpu_gives_absolute_figures_only_unless_peaks_are_given() {
        let text = TRACE.replace("NVIDIA H100 80GB HBM3", "NVIDIA GeForce RTX 4090");
        let summary = summary_of(&text);
        let e = summary.efficiency(PeakOverride::default());
        assert_eq!((e.gpu, e.peak_gbps), (None, None));
        assert!(e
            .notes
            .iter()
            .any(|n| n.contains("no peaks for the GPU the traces record (NVIDIA GeForce RTX 4090)")));
        assert!(e.rows.iter().all(|r| r.peak_fraction.is_none() && r.bound_us.is_none()));
        assert!(close(e.rows.iter().find(|r| r.value.as_deref() == Some("a")).unwrap().tflops, 494.7));
        // Only one peak given: the roofline still needs the other.
        let half = summary.efficiency(PeakOverride { tflops: Some(1000.0), gbps: None });
        assert!(half.rows.iter().all(|r| r.peak_fraction.is_none()));
        let given = summary.efficiency(PeakOverride { tflops: Some(1000.0), gbps: Some(1000.0) });
        let a = given.rows.iter().find(|r| r.value.as_deref() == Some("a")).unwrap();
        assert!(close(a.peak_fraction, 0.4947));
        assert!(!given.notes.iter().any(|n| n.contains("no peaks")));
    }

    #[test]
    fn no_counts_say_so() {
        let text = TRACE.replace("\"flops\"", "\"f\"").replace("\"bytes\"", "\"b\"");
        let e = summary_of(&text).efficiency(PeakOverride::default());
        assert!(e.notes[0].starts_with("no graphed kernel carries FLOP or byte counts"), "{:?}", e.notes);
        assert!(e
            .rows
            .iter()
            .all(|r| r.tflops.is_none() && r.peak_fraction.is_none() && r.attributed_us > 0.0));
        assert_eq!(e.coverage, 0.0);
    }

    #[test]
    fn a_dtype_without_a_peak_gives_no_roofline() {
        let text = TRACE.replace("torch.float32", "torch.float64");
        let e = summary_of(&text).efficiency(PeakOverride::default());
        let b = e.rows.iter().find(|r| r.value.as_deref() == Some("b")).unwrap();
        assert_eq!((b.bound_us, b.peak_fraction), (None, None));
        assert!(b.tflops.is_some());
        assert!(e.notes.iter().any(|n| n.contains("no FLOP peak for dtype torch.float64")));
    }
}
