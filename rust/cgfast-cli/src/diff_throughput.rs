//! `cgfast diff --efficiency`: each value's achieved throughput on both sides, printed
//! after the diff (a table, CSV lines, or the JSON report's `throughput` member).

use std::io::Write;

use cgfast_core::{signed_pct, ThroughputChange};
use serde_json::{json, Value as Json};

use crate::summary_table::{clip_start, percent, print_columns, print_records, scaled, UNANNOTATED};

/// The columns of the CSV lines, as [`ThroughputChange::to_json`] names them.
const CSV_COLUMNS: [&str; 17] = [
    "value",
    "base_counted_kernels",
    "test_counted_kernels",
    "base_counted_us",
    "test_counted_us",
    "base_flops_per_replay",
    "test_flops_per_replay",
    "base_bytes_per_replay",
    "test_bytes_per_replay",
    "base_tflops",
    "test_tflops",
    "tflops_change",
    "base_gbps",
    "test_gbps",
    "gbps_change",
    "base_peak_fraction",
    "test_peak_fraction",
];

fn change(x: Option<f64>) -> String {
    x.map_or("-".to_string(), signed_pct)
}

fn peak(x: Option<f64>) -> String {
    x.map_or("-".to_string(), percent)
}

/// The table after the diff's: a line per value counted on both sides.
pub fn print_table(by: &str, changes: &[ThroughputChange]) {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let _ = writeln!(out);
    if changes.is_empty() {
        let _ = writeln!(
            out,
            "throughput: no value's kernels carry FLOP or byte counts on both sides (args.flops, args.bytes; annotate with flops=True)"
        );
        return;
    }
    let _ = writeln!(out, "throughput of the kernels with FLOP or byte counts, base -> test:");
    let headers =
        [by, "TFLOP/s base", "test", "change", "GB/s base", "test", "change", "of peak base", "test"];
    let mut left = vec![false; headers.len()];
    left[0] = true;
    let rows: Vec<Vec<String>> = changes
        .iter()
        .map(|c| {
            vec![
                clip_start(c.value.as_deref().unwrap_or(UNANNOTATED), 60),
                scaled(c.tflops[0], 0, 1),
                scaled(c.tflops[1], 0, 1),
                change(c.tflops_change),
                scaled(c.gbps[0], 0, 0),
                scaled(c.gbps[1], 0, 0),
                change(c.gbps_change),
                peak(c.peak_fraction[0]),
                peak(c.peak_fraction[1]),
            ]
        })
        .collect();
    print_columns(&mut out, &headers, &left, &rows);
}

/// A CSV line per value counted on both sides.
pub fn print_csv(changes: &[ThroughputChange]) {
    print_records(&CSV_COLUMNS, &changes.iter().map(ThroughputChange::to_json).collect::<Vec<_>>());
}

/// The JSON report's `throughput` member.
pub fn to_json(changes: &[ThroughputChange]) -> Json {
    json!(changes.iter().map(ThroughputChange::to_json).collect::<Vec<_>>())
}
