//! How each value's achieved throughput changed between two runs (`cgfast diff
//! --efficiency`): the [`Efficiency`] reports of both sides joined by value, for the
//! values whose kernels carry FLOP or byte counts on both sides.

use serde_json::{json, Value as Json};

use super::efficiency::{Efficiency, EfficiencyRow};

/// One value's achieved throughput on each side, and its change.
#[derive(Clone, Debug, PartialEq)]
pub struct ThroughputChange {
    /// The value (`None`: kernels without the key).
    pub value: Option<String>,
    /// Its kernels with counts, per side.
    pub counted_kernels: [u64; 2],
    /// The time of its kernels with counts, per side, in microseconds.
    pub counted_us: [f64; 2],
    /// FLOPs per replay, per side.
    pub flops_per_replay: [Option<f64>; 2],
    /// Bytes per replay, per side.
    pub bytes_per_replay: [Option<f64>; 2],
    /// Achieved TFLOP/s, per side.
    pub tflops: [Option<f64>; 2],
    /// Achieved GB/s, per side.
    pub gbps: [Option<f64>; 2],
    /// test / base − 1 of the TFLOP/s (`None`: a side without FLOPs).
    pub tflops_change: Option<f64>,
    /// test / base − 1 of the GB/s.
    pub gbps_change: Option<f64>,
    /// The share of the GPU's peak reached, per side (where its peaks are known).
    pub peak_fraction: [Option<f64>; 2],
}

fn change(base: Option<f64>, test: Option<f64>) -> Option<f64> {
    match (base, test) {
        (Some(b), Some(t)) if b > 0.0 && t > 0.0 => Some(t / b - 1.0),
        _ => None,
    }
}

/// The values counted on both sides, the most base time with counts first.
pub fn throughput_changes(base: &Efficiency, test: &Efficiency) -> Vec<ThroughputChange> {
    let counted = |r: &&EfficiencyRow| r.counted_kernels > 0;
    let mut changes: Vec<ThroughputChange> = base
        .rows
        .iter()
        .filter(counted)
        .filter_map(|b| {
            let t = test.rows.iter().filter(counted).find(|t| t.value == b.value)?;
            let tflops = [b.tflops.filter(|x| *x > 0.0), t.tflops.filter(|x| *x > 0.0)];
            let gbps = [b.gbps.filter(|x| *x > 0.0), t.gbps.filter(|x| *x > 0.0)];
            Some(ThroughputChange {
                value: b.value.clone(),
                counted_kernels: [b.counted_kernels, t.counted_kernels],
                counted_us: [b.counted_us, t.counted_us],
                flops_per_replay: [b.flops_per_replay, t.flops_per_replay],
                bytes_per_replay: [b.bytes_per_replay, t.bytes_per_replay],
                tflops,
                gbps,
                tflops_change: change(tflops[0], tflops[1]),
                gbps_change: change(gbps[0], gbps[1]),
                peak_fraction: [b.peak_fraction, t.peak_fraction],
            })
        })
        .collect();
    changes.sort_by(|a, b| b.counted_us[0].total_cmp(&a.counted_us[0]).then_with(|| a.value.cmp(&b.value)));
    changes
}

impl ThroughputChange {
    /// The row as `--format json` and CSV write it.
    pub fn to_json(&self) -> Json {
        json!({
            "value": self.value,
            "base_counted_kernels": self.counted_kernels[0],
            "test_counted_kernels": self.counted_kernels[1],
            "base_counted_us": self.counted_us[0],
            "test_counted_us": self.counted_us[1],
            "base_flops_per_replay": self.flops_per_replay[0],
            "test_flops_per_replay": self.flops_per_replay[1],
            "base_bytes_per_replay": self.bytes_per_replay[0],
            "test_bytes_per_replay": self.bytes_per_replay[1],
            "base_tflops": self.tflops[0],
            "test_tflops": self.tflops[1],
            "tflops_change": self.tflops_change,
            "base_gbps": self.gbps[0],
            "test_gbps": self.gbps[1],
            "gbps_change": self.gbps_change,
            "base_peak_fraction": self.peak_fraction[0],
            "test_peak_fraction": self.peak_fraction[1],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::summary::{summarize_file, SummaryOptions};
    use crate::{CancelToken, PeakOverride};

    /// Two replays of `gemm` (module a, 50 GFLOP) and `copy` (module b, 100 MB) of the
    /// durations given, in µs; `other` (module c) carries no counts.
    fn trace(gemm_us: u32, copy_us: u32) -> String {
        let kernel = |ts: u32, dur: u32, name: &str, node: u32, corr: u32, args: &str| {
            format!(
                r#"{{"cat": "kernel", "name": "{name}", "pid": 0, "ts": {ts}, "dur": {dur}, "args": {{"graph node id": {node}, "correlation": {corr}, {args}}}}}"#
            )
        };
        let mut events = Vec::new();
        for (corr, at) in [(1, 0), (2, 10_000)] {
            events.push(kernel(at, gemm_us, "gemm", 1, corr, r#""module": "a", "flops": "50000000000""#));
            events.push(kernel(
                at + gemm_us,
                copy_us,
                "copy",
                2,
                corr,
                r#""module": "b", "bytes": "100000000""#,
            ));
            events.push(kernel(at + gemm_us + copy_us, 10, "other", 3, corr, r#""module": "c""#));
        }
        format!(
            r#"{{"deviceProperties": [{{"id": 0, "name": "NVIDIA H100 80GB HBM3"}}], "traceEvents": [{}]}}"#,
            events.join(", ")
        )
    }

    fn efficiency_of(text: &str) -> Efficiency {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.json");
        std::fs::write(&path, text).unwrap();
        let options = SummaryOptions { by: "module".into(), ..SummaryOptions::default() };
        let summary = summarize_file(&path, &options, &CancelToken::new(), &mut |_, _| {}).unwrap();
        summary.efficiency(PeakOverride::default())
    }

    #[test]
    fn values_counted_on_both_sides_with_their_change() {
        // a's GEMM twice as fast (100 -> 50 µs), b's copy 25% slower (100 -> 125 µs)
        let changes = throughput_changes(&efficiency_of(&trace(100, 100)), &efficiency_of(&trace(50, 125)));
        let values: Vec<Option<&str>> = changes.iter().map(|c| c.value.as_deref()).collect();
        assert_eq!(values, [Some("a"), Some("b")]); // c has no counts; a and b tie: by name
        let (a, b) = (&changes[0], &changes[1]);
        assert!((a.tflops[0].unwrap() - 500.0).abs() < 1e-6 && (a.tflops[1].unwrap() - 1000.0).abs() < 1e-6);
        assert!((a.tflops_change.unwrap() - 1.0).abs() < 1e-9);
        assert_eq!((a.gbps, a.gbps_change), ([None, None], None));
        assert!((b.gbps[0].unwrap() - 1000.0).abs() < 1e-6 && (b.gbps_change.unwrap() + 0.2).abs() < 1e-9);
        assert_eq!(b.tflops_change, None);
        assert!(a.peak_fraction[0].is_some() && a.peak_fraction[1] > a.peak_fraction[0]);
        let row = a.to_json();
        assert_eq!(row["value"], "a");
        assert!((row["tflops_change"].as_f64().unwrap() - 1.0).abs() < 1e-9);
    }

    #[test]
    fn a_side_without_counts_gives_no_rows() {
        let plain = trace(100, 100).replace("\"flops\"", "\"f\"").replace("\"bytes\"", "\"b\"");
        assert!(throughput_changes(&efficiency_of(&trace(100, 100)), &efficiency_of(&plain)).is_empty());
    }
}
