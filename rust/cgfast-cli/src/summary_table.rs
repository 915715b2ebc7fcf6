//! The summary as aligned text and as CSV.

use std::io::Write;

use cgfast_core::{Efficiency, EfficiencyRow, Row, Spread, Summary};
use serde_json::Value as Json;

use crate::annotate::thousands;

pub(crate) const UNANNOTATED: &str = "(unannotated)";

/// `void ns::(anonymous namespace)::kernel<float, 4>(int, float*)` as `kernel`:
/// enough to tell kernels apart in a column.
pub fn short_kernel_name(name: &str) -> String {
    if !name.contains("::") && !name.contains('<') {
        return name.to_string();
    }
    let name = name.strip_prefix("void ").unwrap_or(name).replace("(anonymous namespace)", "");
    let mut outside = String::new();
    let mut depth = 0usize;
    for c in name.chars() {
        match c {
            '<' | '(' => depth += 1,
            '>' | ')' => depth = depth.saturating_sub(1),
            c if depth == 0 => outside.push(c),
            _ => {}
        }
    }
    let last = outside.rsplit("::").find(|part| !part.trim().is_empty()).unwrap_or("").trim();
    if last.is_empty() {
        name.to_string()
    } else {
        last.to_string()
    }
}

pub(crate) fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_string()
    } else {
        format!("{}…", text.chars().take(max - 1).collect::<String>())
    }
}

/// Keep the end of a value: the most specific part of a module path.
pub(crate) fn clip_start(text: &str, max: usize) -> String {
    let n = text.chars().count();
    if n <= max {
        text.to_string()
    } else {
        format!("…{}", text.chars().skip(n - (max - 1)).collect::<String>())
    }
}

/// Columns: text ones (`left`) flush left, the rest flush right.
pub(crate) fn print_columns(out: &mut impl Write, headers: &[&str], left: &[bool], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut text = String::from(" ");
        for (k, cell) in cells.iter().enumerate() {
            let pad = " ".repeat(widths[k] - cell.chars().count());
            text.push(' ');
            if left[k] {
                text.push_str(cell);
                if k + 1 < cells.len() {
                    text.push_str(&pad);
                }
            } else {
                text.push_str(&pad);
                text.push_str(cell);
            }
            text.push(' ');
        }
        text.trim_end().to_string()
    };
    let _ = writeln!(out, "{}", line(headers.to_vec()));
    for row in rows {
        let _ = writeln!(out, "{}", line(row.iter().map(String::as_str).collect()));
    }
}

fn ms(us: f64) -> String {
    format!("{:.3}", us / 1000.0)
}

pub(crate) fn percent(fraction: f64) -> String {
    // + 0.0: never "-0.0%"
    format!("{:.1}%", fraction * 100.0 + 0.0)
}

fn spread_text(s: &Spread) -> String {
    format!(
        "median {:.3} µs (min {:.3}, max {:.3}, stdev {:.3}) over {} replays",
        s.median, s.min, s.max, s.stdev, s.count
    )
}

/// `note`: why the default key is not `module`, said after it.
pub fn print_table(summary: &Summary, rows: &[Row], note: Option<&str>) {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let t = summary.totals();
    let traces = if t.traces == 1 { "1 trace".to_string() } else { format!("{} traces", t.traces) };
    let _ = writeln!(
        out,
        "cgfast summary by {}{}: {traces}, {} graphed kernels in {} replays",
        cgfast_core::key_label(&summary.by),
        note.map_or(String::new(), |n| format!(" ({n})")),
        thousands(t.kernels),
        thousands(t.replays)
    );
    if summary.hierarchy.rolls_up() {
        let mut how = Vec::new();
        if let Some(depth) = summary.hierarchy.depth {
            how.push(format!(
                "rolled up to their first {depth} dotted segment{}",
                if depth == 1 { "" } else { "s" }
            ));
        }
        if summary.hierarchy.group_layers {
            how.push("numbered layers merged as *".to_string());
        }
        let _ = writeln!(out, "  values         {}", how.join("; "));
    }
    let _ = writeln!(
        out,
        "  busy           {} ms of GPU time (overlapping kernels counted once; kernel time {} ms)",
        ms(t.busy_us),
        ms(t.total_us)
    );
    let _ = writeln!(
        out,
        "  annotated      {} of busy time; unannotated: {} kernels, {} ms",
        percent(t.coverage),
        thousands(t.unannotated_kernels),
        ms(t.unannotated_us)
    );
    if t.ungraphed_kernels > 0 {
        let _ = writeln!(
            out,
            "  not graphed    {} kernels, {} ms (not counted)",
            thousands(t.ungraphed_kernels),
            ms(t.ungraphed_us)
        );
    }
    let without_ids = [
        (
            "unresolved",
            t.unresolved_kernels,
            t.unresolved_us,
            "their replay was ambiguous or matched no recorded graph",
        ),
        (
            "ambiguous",
            t.ambiguous_replay_kernels,
            t.ambiguous_replay_us,
            "several recorded graphs with differing annotations fit their replay",
        ),
        (
            "unmatched",
            t.unmatched_replay_kernels,
            t.unmatched_replay_us,
            "their replay matched no recorded graph",
        ),
    ];
    for (label, kernels, us, why) in without_ids.into_iter().filter(|w| w.1 > 0) {
        let _ = writeln!(
            out,
            "  {label:<14} {} of them graph-launched, {} ms: {why}, so they carry no node id or annotation",
            thousands(kernels),
            ms(us)
        );
    }
    if t.unusable_events > 0 {
        let _ = writeln!(
            out,
            "  unusable       {} graphed events without a numeric ts and dur (not counted)",
            thousands(t.unusable_events)
        );
    }
    if summary.steps {
        let (busy, span) = summary.replay_spread();
        let _ = writeln!(out, "  replay busy    {}", spread_text(&busy));
        let _ = writeln!(out, "  replay span    {}", spread_text(&span));
    }
    let _ = writeln!(out);

    let mut headers =
        vec![summary.by.as_str(), "kernels", "total ms", "mean µs", "own busy ms", "attributed ms", "share"];
    if summary.steps {
        headers.extend(["replays", "median µs/replay", "min", "max", "stdev"]);
    }
    headers.push("top kernel");
    let mut left = vec![false; headers.len()];
    left[0] = true;
    *left.last_mut().expect("columns") = true;
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let mut cells = vec![
                clip_start(r.value.as_deref().unwrap_or(UNANNOTATED), 60),
                thousands(r.kernels),
                ms(r.total_us),
                format!("{:.3}", r.mean_us),
                ms(r.busy_us),
                ms(r.attributed_us),
                percent(r.share),
            ];
            if let Some(s) = &r.per_replay {
                cells.extend([
                    thousands(s.count as u64),
                    format!("{:.3}", s.median),
                    format!("{:.3}", s.min),
                    format!("{:.3}", s.max),
                    format!("{:.3}", s.stdev),
                ]);
            }
            cells.push(match r.top_kernels.first() {
                Some((name, n)) => format!(
                    "{} ({:.0}%)",
                    clip(&short_kernel_name(name), 48),
                    100.0 * n.total_ns as f64 / 1000.0 / r.total_us.max(1e-9)
                ),
                None => String::new(),
            });
            cells
        })
        .collect();
    print_columns(&mut out, &headers, &left, &table);

    if summary.steps {
        let _ = writeln!(out);
        let with_trace = summary.traces.len() > 1;
        let mut headers = vec!["replay", "start µs", "kernels", "busy µs", "span µs", "largest value"];
        let mut left = vec![false, false, false, false, false, true];
        if with_trace {
            headers.insert(0, "trace");
            left.insert(0, true);
        }
        let table: Vec<Vec<String>> = summary
            .replays
            .iter()
            .map(|r| {
                let largest = r.values.first().map_or(String::new(), |v| {
                    format!(
                        "{} ({:.0}%)",
                        clip_start(v.value.as_deref().unwrap_or(UNANNOTATED), 48),
                        100.0 * v.attributed_ns / (r.busy_ns as f64).max(1e-9)
                    )
                });
                let mut cells = vec![
                    r.correlation.to_string(),
                    format!("{:.3}", r.start_ns as f64 / 1000.0),
                    thousands(r.kernels),
                    format!("{:.3}", r.busy_ns as f64 / 1000.0),
                    format!("{:.3}", (r.end_ns - r.start_ns) as f64 / 1000.0),
                    largest,
                ];
                if with_trace {
                    let path = &summary.traces[r.trace].path;
                    cells.insert(
                        0,
                        path.file_name()
                            .map_or(path.display().to_string(), |n| n.to_string_lossy().into_owned()),
                    );
                }
                cells
            })
            .collect();
        print_columns(&mut out, &headers, &left, &table);
    }
}

/// `x` scaled by 10^-`power`, `digits` decimals; `-` where there is none.
pub(crate) fn scaled(x: Option<f64>, power: i32, digits: usize) -> String {
    x.map_or("-".to_string(), |x| format!("{:.digits$}", x / 10f64.powi(power) + 0.0))
}

/// The efficiency report after the table: peaks, notes, a line per value.
pub fn print_efficiency(summary: &Summary, e: &Efficiency) {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let _ = writeln!(out);
    let gpu = match (&e.gpu, e.devices.as_slice()) {
        (Some(gpu), _) => gpu.to_string(),
        (None, []) => "unknown GPU".to_string(),
        (None, devices) => devices.join(", "),
    };
    let peaks: Vec<String> = e.peak_tflops.iter().map(|(c, p)| format!("{p} {}", c.name())).collect();
    let _ = writeln!(
        out,
        "efficiency on {gpu}: peaks {} TFLOP/s, {} GB/s; kernels with counts {} of busy time",
        if peaks.is_empty() { "unknown".to_string() } else { peaks.join(", ") },
        e.peak_gbps.map_or("unknown".to_string(), |g| g.to_string()),
        percent(e.coverage)
    );
    for note in &e.notes {
        let _ = writeln!(out, "  note: {note}");
    }
    let _ = writeln!(out);
    let headers = [
        summary.by.as_str(),
        "attributed ms",
        "coverage",
        "GFLOP/replay",
        "MB/replay",
        "TFLOP/s",
        "GB/s",
        "FLOP/B",
        "bound ms",
        "of peak",
        "above roofline ms",
    ];
    let mut left = vec![false; headers.len()];
    left[0] = true;
    let percent_of = |x: Option<f64>| x.map_or("-".to_string(), percent);
    let table: Vec<Vec<String>> = e
        .rows
        .iter()
        .map(|r: &EfficiencyRow| {
            vec![
                clip_start(r.value.as_deref().unwrap_or(UNANNOTATED), 60),
                ms(r.attributed_us),
                percent(r.coverage),
                scaled(r.flops_per_replay, 9, 3),
                scaled(r.bytes_per_replay, 6, 3),
                scaled(r.tflops, 0, 1),
                scaled(r.gbps, 0, 0),
                scaled(r.intensity, 0, 1),
                scaled(r.bound_us, 3, 3),
                percent_of(r.peak_fraction),
                scaled(r.above_roofline_us, 3, 3),
            ]
        })
        .collect();
    print_columns(&mut out, &headers, &left, &table);
}

/// A line per value of the efficiency report.
pub fn print_efficiency_csv(e: &Efficiency) {
    let columns = [
        "value",
        "kernels",
        "counted_kernels",
        "attributed_us",
        "counted_us",
        "coverage",
        "flops_per_replay",
        "bytes_per_replay",
        "tflops",
        "gbps",
        "intensity",
        "bound_us",
        "peak_fraction",
        "above_roofline_us",
    ];
    print_records(&columns, &e.rows.iter().map(EfficiencyRow::to_json).collect::<Vec<_>>());
}

pub(crate) fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

/// Times (`*_us`) to the nanosecond, shares to six decimals.
fn csv_cell(column: &str, v: &Json) -> String {
    match v {
        Json::Null => String::new(),
        Json::String(s) => csv_field(s),
        Json::Number(n) if n.is_f64() => {
            let f = n.as_f64().expect("a float");
            let text = if column.ends_with("_us") { format!("{f:.3}") } else { format!("{f:.6}") };
            text.trim_end_matches('0').trim_end_matches('.').to_string()
        }
        Json::Number(n) => n.to_string(),
        other => csv_field(&other.to_string()),
    }
}

pub(crate) fn print_records(columns: &[&str], records: &[Json]) {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let _ = writeln!(out, "{}", columns.join(","));
    for r in records {
        let cells: Vec<String> = columns.iter().map(|c| csv_cell(c, &r[*c])).collect();
        let _ = writeln!(out, "{}", cells.join(","));
    }
}

/// Without `steps`, a line per value; with it, a line per value per replay. The value
/// of unannotated kernels is empty; `top_kernels` is a JSON list.
pub fn print_json(summary: &Summary, top: usize, efficiency: Option<&Efficiency>) {
    let mut report = summary.to_json(top);
    if let Some(e) = efficiency {
        report["efficiency"] = e.to_json();
    }
    let text = serde_json::to_string_pretty(&report).expect("JSON of a report");
    let _ = writeln!(std::io::stdout().lock(), "{text}");
}

pub fn print_csv(summary: &Summary, rows: &[Row]) {
    if summary.steps {
        let columns = [
            "trace",
            "replay",
            "value",
            "kernels",
            "total_us",
            "busy_us",
            "attributed_us",
            "share",
            "replay_start_us",
            "replay_span_us",
            "replay_busy_us",
        ];
        print_records(&columns, &summary.replay_rows());
    } else {
        let columns =
            ["value", "kernels", "total_us", "mean_us", "busy_us", "attributed_us", "share", "top_kernels"];
        print_records(&columns, &rows.iter().map(Row::to_json).collect::<Vec<_>>());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_names_are_shortened_to_the_function() {
        let cases = [
            ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float, false>(int, float, float const*)", "vectorized_layer_norm_kernel"),
            ("void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::CUDAFunctor_add<float> >(at::TensorIteratorBase&)::{lambda(int)#1}>(int)", "elementwise_kernel"),
            ("void (anonymous namespace)::softmax_warp_forward<float, float, float, 7, false, false>(float*, float const*, int)", "softmax_warp_forward"),
            ("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x64x8_stage3", "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x64x8_stage3"),
            ("Memcpy DtoD (Device -> Device)", "Memcpy DtoD (Device -> Device)"),
            ("triton_poi_fused_add_0", "triton_poi_fused_add_0"),
        ];
        for (name, short) in cases {
            assert_eq!(short_kernel_name(name), short, "{name}");
        }
    }

    #[test]
    fn csv_quotes_what_needs_it() {
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(csv_cell("share", &serde_json::json!(0.1 + 0.2)), "0.3");
        assert_eq!(csv_cell("share", &serde_json::json!(0.1234567)), "0.123457");
        assert_eq!(csv_cell("total_us", &serde_json::json!(12.5)), "12.5");
        assert_eq!(csv_cell("start_us", &serde_json::json!(5361804758583.654)), "5361804758583.654");
        assert_eq!(csv_cell("total_us", &serde_json::json!(3.0)), "3");
        assert_eq!(csv_cell("kernels", &serde_json::json!(7)), "7");
        assert_eq!(csv_cell("value", &Json::Null), "");
        assert_eq!(
            csv_cell("top_kernels", &serde_json::json!([{"name": "k"}])),
            "\"[{\"\"name\"\":\"\"k\"\"}]\""
        );
    }

    #[test]
    fn columns_line_up() {
        let mut out = Vec::new();
        print_columns(
            &mut out,
            &["v", "n", "k"],
            &[true, false, true],
            &[
                vec!["long value".into(), "1".into(), "x".into()],
                vec!["a".into(), "1,000".into(), "y".into()],
            ],
        );
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text, "  v               n  k\n  long value      1  x\n  a           1,000  y\n");
    }
}
