//! The summary of a small trace whose numbers are worked out by hand.

use super::*;

/// GPU 0, lanes 7 and 8, and GPU 1; times in µs.
///
/// replay 1: a [0,10) lane 7, b [5,15) lane 8, unannotated [20,24) lane 7
/// replay 2: a [100,110) lane 7, a [100,104) lane 8, b [112,114) lane 7
/// replay 3: a [0,6) on GPU 1 (overlaps replay 1 in time, but on another GPU)
/// plus an eager kernel (graph node id 0) and a CPU op, which do not count.
const TRACE: &str = r#"{"traceEvents": [
  {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 0, "dur": 10, "args": {"graph node id": 1, "correlation": 1, "name": "a"}},
  {"ph": "X", "cat": "kernel", "name": "softmax", "pid": 0, "tid": 8, "ts": 5, "dur": 10, "args": {"graph node id": 2, "correlation": 1, "name": "b"}},
  {"ph": "X", "cat": "gpu_memcpy", "name": "copy", "pid": 0, "tid": 7, "ts": 20, "dur": 4, "args": {"graph node id": 3, "correlation": 1}},
  {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 100, "dur": 10, "args": {"graph node id": 1, "correlation": 2, "name": "a"}},
  {"ph": "X", "cat": "kernel", "name": "norm", "pid": 0, "tid": 8, "ts": 100, "dur": 4, "args": {"graph node id": 4, "correlation": 2, "name": "a"}},
  {"ph": "X", "cat": "kernel", "name": "softmax", "pid": 0, "tid": 7, "ts": 112, "dur": 2, "args": {"graph node id": 2, "correlation": 2, "name": "b"}},
  {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 1, "tid": 7, "ts": 0, "dur": 6, "args": {"graph node id": 1, "correlation": 3, "name": "a"}},
  {"ph": "X", "cat": "kernel", "name": "eager", "pid": 0, "tid": 7, "ts": 200, "dur": 3, "args": {"graph node id": 0, "correlation": 9}},
  {"ph": "X", "cat": "cpu_op", "name": "op", "pid": 5, "tid": 5, "ts": 0, "dur": 500, "args": {"name": "a"}}
]}"#;

fn summary_of(text: &str, by: &str, steps: bool) -> Summary {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.json");
    std::fs::write(&path, text).unwrap();
    summarize_file(
        &path,
        &SummaryOptions { by: by.into(), steps, top: 3, ..SummaryOptions::default() },
        &CancelToken::new(),
        &mut |_, _| {},
    )
    .unwrap()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn busy_time_counts_overlaps_once_and_shares_sum_to_one() {
    let s = summary_of(TRACE, "name", false);
    let t = s.totals();
    // GPU 0: [0,15) + [20,24) + [100,110) + [112,114) = 31; GPU 1: 6.
    assert_eq!((t.kernels, t.replays, t.busy_us, t.total_us), (7, 3, 37.0, 46.0));
    assert_eq!(
        (t.ungraphed_kernels, t.ungraphed_us, t.unannotated_kernels, t.unannotated_us),
        (1, 3.0, 1, 4.0)
    );
    assert!(close(t.coverage, 33.0 / 37.0));

    let rows = s.rows(3);
    let values: Vec<Option<&str>> = rows.iter().map(|r| r.value.as_deref()).collect();
    assert_eq!(values, vec![Some("a"), Some("b"), None]);
    let a = &rows[0];
    // a: 7.5 ([0,5) alone, half of [5,10)) + 8 + 2 ([100,104) split between its own
    // two kernels, [104,110) alone) + 6 on GPU 1 = 23.5; its own union is 26.
    assert_eq!((a.kernels, a.total_us, a.mean_us, a.busy_us), (4, 30.0, 7.5, 26.0));
    assert!(close(a.attributed_us, 23.5) && close(a.share, 23.5 / 37.0));
    assert_eq!(
        a.top_kernels,
        vec![
            ("gemm".to_string(), NameTotals { kernels: 3, total_ns: 26_000 }),
            ("norm".to_string(), NameTotals { kernels: 1, total_ns: 4_000 })
        ]
    );
    let b = &rows[1];
    assert_eq!((b.kernels, b.total_us, b.busy_us), (2, 12.0, 12.0));
    assert!(close(b.attributed_us, 9.5));
    let none = &rows[2];
    assert_eq!((none.kernels, none.total_us, none.busy_us, none.attributed_us), (1, 4.0, 4.0, 4.0));
    assert!(close(rows.iter().map(|r| r.share).sum::<f64>(), 1.0));
    assert!(rows.iter().all(|r| r.per_replay.is_none()));
    assert!(s.replays.is_empty());
}

#[test]
fn per_replay_totals_and_spread() {
    let s = summary_of(TRACE, "name", true);
    let got: Vec<(i64, i64, i64, u64, i64)> =
        s.replays.iter().map(|r| (r.correlation, r.start_ns, r.end_ns, r.kernels, r.busy_ns)).collect();
    assert_eq!(
        got,
        vec![(1, 0, 24_000, 3, 19_000), (3, 0, 6_000, 1, 6_000), (2, 100_000, 114_000, 3, 12_000)]
    );
    let r2 = &s.replays[2];
    assert_eq!(r2.values.len(), 2);
    assert_eq!(
        (r2.values[0].value.as_deref(), r2.values[0].kernels, r2.values[0].total_ns, r2.values[0].busy_ns),
        (Some("a"), 2, 14_000, 10_000)
    );
    assert!(close(r2.values[0].attributed_ns, 10_000.0) && close(r2.values[1].attributed_ns, 2_000.0));

    let rows = s.rows(3);
    let a = rows[0].per_replay.unwrap();
    assert_eq!((a.count, a.min, a.median, a.max), (3, 6.0, 7.5, 10.0));
    let none = rows[2].per_replay.unwrap();
    assert_eq!((none.count, none.min, none.max), (1, 4.0, 4.0));

    let (busy, span) = s.replay_spread();
    assert_eq!((busy.min, busy.median, busy.max), (6.0, 12.0, 19.0));
    assert_eq!((span.min, span.median, span.max), (6.0, 14.0, 24.0));

    let flat = s.replay_rows();
    assert_eq!(flat.len(), 3 + 1 + 2);
    assert_eq!(flat[0]["replay"], 1);
    assert_eq!(flat[0]["replay_busy_us"], 19.0);
    let shares: f64 = flat.iter().filter(|r| r["replay"] == 1).map(|r| r["share"].as_f64().unwrap()).sum();
    assert!(close(shares, 1.0));
}

#[test]
fn traces_add_up() {
    let mut s = summary_of(TRACE, "name", true);
    s.merge(summary_of(TRACE, "name", true));
    let t = s.totals();
    assert_eq!((t.traces, t.kernels, t.replays, t.busy_us), (2, 14, 6, 74.0));
    let a = &s.rows(3)[0];
    assert_eq!((a.kernels, a.busy_us, a.per_replay.unwrap().count), (8, 52.0, 6));
    assert!(close(a.share, 23.5 / 37.0));
    assert_eq!(s.replays.iter().filter(|r| r.trace == 1).count(), 3);
}

#[test]
fn a_key_no_kernel_has_leaves_everything_unannotated() {
    let s = summary_of(TRACE, "module", false);
    let rows = s.rows(3);
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0].value.as_deref(), rows[0].kernels, rows[0].share), (None, 7, 1.0));
    assert_eq!(s.totals().coverage, 0.0);
    let json = s.to_json(3);
    assert_eq!(json["rows"][0]["value"], serde_json::Value::Null);
    assert_eq!(json["by"], "module");
}

#[test]
fn the_report_as_json() {
    let s = summary_of(TRACE, "name", true);
    let v = s.to_json(1);
    assert_eq!(v["totals"]["busy_us"], 37.0);
    assert_eq!(v["rows"][0]["value"], "a");
    assert_eq!(v["rows"][0]["top_kernels"].as_array().unwrap().len(), 1);
    assert_eq!(v["rows"][0]["replay_median_us"], 7.5);
    assert_eq!(v["replays"].as_array().unwrap().len(), 3);
    assert_eq!(v["replay_spread"]["busy_us"]["max"], 19.0);
    assert_eq!(v["traces"][0]["ungraphed_kernels"], 1);
}

#[test]
fn failures_are_reported_per_file() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.json");
    let bad = dir.path().join("bad.json");
    std::fs::write(&good, TRACE).unwrap();
    std::fs::write(&bad, "{\"traceEvents\": [").unwrap();
    let paths = vec![good, dir.path().join("missing.json"), bad];
    struct Finished(std::sync::Mutex<Vec<(usize, bool)>>);
    impl FilesProgress for Finished {
        fn advance(&self, _: usize, fraction: f64) {
            assert!((0.0..=1.0).contains(&fraction));
        }
        fn finished(&self, file: usize, ok: bool) {
            self.0.lock().unwrap().push((file, ok));
        }
        fn show(&self) {}
    }
    let progress = Finished(Default::default());
    let (s, failures) =
        summarize_files(&paths, &SummaryOptions::default(), 2, &progress, &CancelToken::new());
    let mut finished = progress.0.into_inner().unwrap();
    finished.sort();
    assert_eq!(finished, vec![(0, true), (1, false), (2, false)]);
    assert_eq!(s.traces.len(), 1);
    assert_eq!(failures.len(), 2);
    assert!(failures[0].to_string().ends_with("missing.json: no such file"), "{failures:?}");
    assert!(failures[1].to_string().contains("bad.json: the trace is truncated"), "{failures:?}");
}

#[test]
fn chart_bars_are_sorted_and_escaped() {
    let text = TRACE.replace("\"name\": \"b\"", "\"name\": \"<b & c>\"");
    let s = summary_of(&text, "name", false);
    let rows = s.rows(3);
    let svg = chart::svg(&s, &rows);
    assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
    assert!(svg.contains("&lt;b &amp; c&gt;") && !svg.contains("<b & c>"));
    let widths: Vec<f64> = svg
        .lines()
        .filter(|l| l.contains("<rect x=\"380\""))
        .map(|l| l.split("width=\"").nth(1).unwrap().split('"').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(widths.len(), 3);
    assert!(widths.windows(2).all(|w| w[0] >= w[1]), "{widths:?}");
    assert_eq!(widths[0], 500.0);
    assert!(svg.contains(chart::UNANNOTATED_COLOR));
    let html = chart::html(&s, &rows, None);
    assert!(
        html.starts_with("<!DOCTYPE html>")
            && html.contains("<svg")
            && html.contains("<td>(unannotated)</td>")
    );
    for page in [&svg, &html] {
        assert!(!page.contains("http://") || page.matches("http://").count() == 1, "only the SVG namespace");
        assert!(!page.contains("<script") && !page.contains("href") && !page.contains("url("));
    }
}

#[test]
fn chart_folds_the_smallest_values() {
    let events: Vec<String> = (0..60)
        .map(|i| format!(r#"{{"cat": "kernel", "name": "k", "pid": 0, "ts": {}, "dur": {}, "args": {{"graph node id": 1, "name": "v{i}"}}}}"#, i * 100, 60 - i))
        .collect();
    let s = summary_of(&format!("{{\"traceEvents\": [{}]}}", events.join(",")), "name", false);
    let svg = chart::svg(&s, &s.rows(3));
    assert_eq!(svg.matches("<rect x=\"380\"").count(), chart::MAX_BARS);
    assert!(svg.contains("… and 20 more values"), "{svg}");
}

#[test]
fn chart_file_names() {
    let s = summary_of(TRACE, "name", false);
    let dir = tempfile::tempdir().unwrap();
    assert!(chart::write(&dir.path().join("c.png"), &s, &s.rows(3), None)
        .unwrap_err()
        .to_string()
        .contains("must be a .svg or .html"));
    chart::write(&dir.path().join("c.SVG"), &s, &s.rows(3), None).unwrap();
    let unwritable =
        chart::write(&dir.path().join("no/such/c.svg"), &s, &s.rows(3), None).unwrap_err().to_string();
    assert!(unwritable.ends_with("c.svg: cannot write: no such file"), "{unwritable}");
}

/// Two layers of one model, on two lanes: layer 0's attention [0,10), layer 1's
/// attention [5,15) and mlp [20,24), and the model's own norm [30,32).
const LAYERS: &str = r#"{"traceEvents": [
  {"ph": "X", "cat": "kernel", "name": "sdpa", "pid": 0, "tid": 7, "ts": 0, "dur": 10, "args": {"graph node id": 1, "correlation": 1, "module": "model.layers.0.attn"}},
  {"ph": "X", "cat": "kernel", "name": "sdpa", "pid": 0, "tid": 8, "ts": 5, "dur": 10, "args": {"graph node id": 2, "correlation": 1, "module": "model.layers.1.attn"}},
  {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 20, "dur": 4, "args": {"graph node id": 3, "correlation": 1, "module": "model.layers.1.mlp"}},
  {"ph": "X", "cat": "kernel", "name": "norm", "pid": 0, "tid": 7, "ts": 30, "dur": 2, "args": {"graph node id": 4, "correlation": 1, "module": "model"}}
]}"#;

fn rolled_up(depth: Option<usize>, group_layers: bool) -> Summary {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.json");
    std::fs::write(&path, LAYERS).unwrap();
    let hierarchy = hierarchy::Hierarchy { depth, group_layers, tree: false };
    summarize_file(
        &path,
        &SummaryOptions { by: "module".into(), steps: true, hierarchy, ..SummaryOptions::default() },
        &CancelToken::new(),
        &mut |_, _| {},
    )
    .unwrap()
}

#[test]
fn rolled_up_values_are_one_value_throughout() {
    let values = |s: &Summary| {
        s.rows(3)
            .iter()
            .map(|r| (r.value.clone().unwrap(), r.kernels, r.busy_us, r.attributed_us))
            .collect::<Vec<_>>()
    };
    // Merged layers: one union ([0,15) + [20,24)), not the sum of the layers' own.
    assert_eq!(
        values(&rolled_up(None, true)),
        [
            ("model.layers.*.attn".into(), 2, 15.0, 15.0),
            ("model.layers.*.mlp".into(), 1, 4.0, 4.0),
            ("model".into(), 1, 2.0, 2.0)
        ]
    );
    assert_eq!(
        values(&rolled_up(Some(2), false)),
        [("model.layers".into(), 3, 19.0, 19.0), ("model".into(), 1, 2.0, 2.0)]
    );
    assert_eq!(
        values(&rolled_up(Some(3), true)),
        [("model.layers.*".into(), 3, 19.0, 19.0), ("model".into(), 1, 2.0, 2.0)]
    );
    let s = rolled_up(Some(3), false);
    assert_eq!(
        values(&s)[..2],
        [("model.layers.1".into(), 2, 14.0, 11.5), ("model.layers.0".into(), 1, 10.0, 7.5)]
    );
    // Replays see the merged values too.
    let merged = rolled_up(Some(1), false);
    assert_eq!(merged.replays[0].values.len(), 1);
    assert_eq!(merged.rows(3)[0].per_replay.unwrap().count, 1);
    let json = merged.to_json(3);
    assert_eq!((json["depth"].as_u64(), json["group_layers"].as_bool()), (Some(1), Some(false)));
    assert!(
        summary_of(LAYERS, "module", false).to_json(3).get("depth").is_none(),
        "no new keys without the options"
    );
}

#[test]
fn the_icicle_is_as_wide_as_the_busy_time() {
    let s = rolled_up(None, true);
    let (svg, height) = icicle::svg(&s, &s.rows(3));
    assert!(
        svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\"")
            && svg.contains(&format!("height=\"{height}\""))
    );
    assert!(!svg.contains("<script") && !svg.contains("href") && !svg.contains("url("));
    // A rect per path (root, model, layers, *, attn, mlp) and one for model's own norm.
    let widths: Vec<(String, f64)> = svg
        .lines()
        .filter(|l| l.contains("<rect x="))
        .map(|l| {
            let title = l.split("<title>").nth(1).unwrap().split(" — ").next().unwrap().to_string();
            let w: f64 = l.split("width=\"").nth(1).unwrap().split('"').next().unwrap().parse().unwrap();
            (title, w + 1.0)
        })
        .collect();
    let names: Vec<&str> = widths.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(
        names,
        [
            "all graphed kernels",
            "model",
            "model.layers",
            "model.layers.*",
            "model.layers.*.attn",
            "model.layers.*.mlp",
            "model itself (kernels of this path, not of a path under it)"
        ]
    );
    // Busy time 21 µs over 1068 px.
    let px = |us: f64| us / 21.0 * 1068.0;
    for ((_, w), us) in widths.iter().zip([21.0, 21.0, 19.0, 19.0, 15.0, 4.0, 2.0]) {
        assert!((w - px(us)).abs() <= 1.0, "{widths:?}");
    }
    let both = icicle::with_bars(&s, &s.rows(3), &chart::svg(&s, &s.rows(3)));
    assert!(both.contains(&format!("<svg y=\"{height}\" xmlns")));
}

#[test]
fn graph_launched_work_without_a_node_id_is_counted_as_unresolved() {
    // replay 5 (a cudaGraphLaunch) left without ids; correlation 9 launched eagerly
    let text = r#"{"traceEvents": [
      {"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 5, "tid": 5, "ts": 0, "dur": 1, "args": {"correlation": 5}},
      {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 5, "tid": 5, "ts": 0, "dur": 1, "args": {"correlation": 9}},
      {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 2, "args": {"correlation": 5}},
      {"ph": "X", "cat": "gpu_memcpy", "name": "c", "pid": 0, "tid": 7, "ts": 13, "dur": 3, "args": {"correlation": 5}},
      {"ph": "X", "cat": "kernel", "name": "e", "pid": 0, "tid": 7, "ts": 20, "dur": 4, "args": {"correlation": 9}},
      {"ph": "X", "cat": "kernel", "name": "g", "pid": 0, "tid": 7, "ts": 30, "dur": 4, "args": {"correlation": 6, "graph node id": 3}}
    ]}"#;
    let s = summary_of(text, "name", false);
    let t = s.totals();
    assert_eq!((t.ungraphed_kernels, t.unresolved_kernels, t.unresolved_us), (3, 2, 5.0));
    let v = s.to_json(3);
    assert_eq!(
        (v["totals"]["unresolved_kernels"].as_u64(), v["traces"][0]["unresolved_kernels"].as_u64()),
        (Some(2), Some(2))
    );
    // none: the report reads as before
    assert!(summary_of(TRACE, "name", false).to_json(3)["totals"].get("unresolved_kernels").is_none());
}

#[test]
fn marked_replays_are_counted_apart_from_the_unmarked_rest() {
    // replays 5 and 6 marked by annotate, replay 8 left unmarked (an older annotate)
    let text = r#"{"traceEvents": [
      {"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 5, "tid": 5, "ts": 0, "dur": 1, "args": {"correlation": 5}},
      {"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 5, "tid": 5, "ts": 1, "dur": 1, "args": {"correlation": 6}},
      {"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 5, "tid": 5, "ts": 2, "dur": 1, "args": {"correlation": 8}},
      {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 2, "args": {"correlation": 5, "cgfast": "ambiguous replay"}},
      {"ph": "X", "cat": "gpu_memcpy", "name": "c", "pid": 0, "tid": 7, "ts": 13, "dur": 3, "args": {"correlation": 5, "cgfast": "ambiguous replay"}},
      {"ph": "X", "cat": "kernel", "name": "u", "pid": 0, "tid": 7, "ts": 20, "dur": 4, "args": {"cgfast": "unmatched replay", "correlation": 6}},
      {"ph": "X", "cat": "kernel", "name": "o", "pid": 0, "tid": 7, "ts": 25, "dur": 1, "args": {"correlation": 8}},
      {"ph": "X", "cat": "kernel", "name": "g", "pid": 0, "tid": 7, "ts": 30, "dur": 4, "args": {"correlation": 9, "graph node id": 3}}
    ]}"#;
    let s = summary_of(text, "name", false);
    let t = s.totals();
    assert_eq!(
        (
            t.ungraphed_kernels,
            t.ambiguous_replay_kernels,
            t.ambiguous_replay_us,
            t.unmatched_replay_kernels,
            t.unmatched_replay_us
        ),
        (4, 2, 5.0, 1, 4.0)
    );
    assert_eq!((t.unresolved_kernels, t.unresolved_us), (1, 1.0));
    let v = s.to_json(3);
    let counts = |o: &serde_json::Value| {
        (
            o["ambiguous_replay_kernels"].as_u64(),
            o["unmatched_replay_kernels"].as_u64(),
            o["unresolved_kernels"].as_u64(),
        )
    };
    assert_eq!(counts(&v["totals"]), (Some(2), Some(1), Some(1)));
    assert_eq!(counts(&v["traces"][0]), (Some(2), Some(1), Some(1)));
    // without markers the report reads as before
    assert!(summary_of(TRACE, "name", false).to_json(3)["totals"].get("ambiguous_replay_kernels").is_none());
}
