//! Diffs of small traces whose numbers are known.

use super::*;
use crate::files::many::Silent;
use compare::Segment;
use samples::reduce;
use std::path::Path;

/// A kernel of a replay: its module (or none), name and duration in µs.
type K<'a> = (Option<&'a str>, &'a str, f64);

/// A trace of `replays`, each a list of kernels run one after the other on one lane;
/// `top` is put before `traceEvents` (a `distributedInfo`, ...).
fn trace_text(replays: &[Vec<K<'_>>], top: &str) -> String {
    let mut events = Vec::new();
    let mut ts = 0.0;
    for (r, kernels) in replays.iter().enumerate() {
        for (node, (module, name, dur)) in kernels.iter().enumerate() {
            let module = module.map_or(String::new(), |m| format!(r#", "module": "{m}""#));
            events.push(format!(
                r#"{{"ph": "X", "cat": "kernel", "name": "{name}", "pid": 0, "tid": 7, "ts": {ts:.3}, "dur": {dur:.3}, "args": {{"correlation": {}, "graph node id": {}{module}}}}}"#,
                100 + r,
                node + 1
            ));
            ts += dur + 1.0;
        }
        ts += 50.0;
    }
    format!(r#"{{{top}"traceEvents": [{}]}}"#, events.join(",\n"))
}

/// SplitMix64, for noise that is the same on every run.
struct Rng(u64);

impl Rng {
    fn uniform(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// `n` replays of a small model: `a` (two kernels), `b`, `c.x`, `c.y` and an
/// unannotated copy, each with about 1% of noise; `scale` multiplies a module's times.
fn model(
    n: usize,
    seed: u64,
    scale: &dyn Fn(&str) -> f64,
    extra: Option<K<'static>>,
) -> Vec<Vec<K<'static>>> {
    let mut rng = Rng(seed);
    let base: [K<'static>; 6] = [
        (Some("a"), "gemm", 40.0),
        (Some("a"), "bias", 10.0),
        (Some("b"), "softmax", 30.0),
        (Some("c.x"), "norm", 20.0),
        (Some("c.y"), "gelu", 20.0),
        (None, "Memcpy DtoD", 5.0),
    ];
    (0..n)
        .map(|_| {
            let mut replay: Vec<K<'static>> = base
                .iter()
                .map(|&(m, name, dur)| {
                    (m, name, dur * m.map_or(1.0, scale) * (1.0 + 0.02 * (rng.uniform() - 0.5)))
                })
                .collect();
            replay.extend(extra);
            replay
        })
        .collect()
}

struct Files {
    dir: tempfile::TempDir,
}

impl Files {
    fn new() -> Files {
        Files { dir: tempfile::tempdir().unwrap() }
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }
}

fn diff<B: AsRef<Path>, T: AsRef<Path>>(
    base: &[B],
    test: &[T],
    options: &DiffOptions,
) -> Result<Diff, String> {
    let paths = |p: &[B]| p.iter().map(|p| p.as_ref().to_path_buf()).collect::<Vec<_>>();
    let test: Vec<PathBuf> = test.iter().map(|p| p.as_ref().to_path_buf()).collect();
    diff_files(&paths(base), &test, options, 2, &Silent, &CancelToken::new()).map_err(|e| e.to_string())
}

fn row<'a>(c: &'a Comparison, value: Option<&str>) -> &'a DiffRow {
    c.rows.iter().find(|r| r.value.as_deref() == value).unwrap_or_else(|| panic!("no row {value:?}"))
}

fn tree_row<'a>(c: &'a Comparison, path: &str) -> &'a DiffRow {
    c.tree.iter().find(|r| r.value.as_deref() == Some(path)).unwrap_or_else(|| panic!("no path {path}"))
}

#[test]
fn a_changed_module_and_only_it_is_slower() {
    let f = Files::new();
    let base = f.write("base.json", &trace_text(&model(40, 1, &|_| 1.0, None), ""));
    // c.x 10% slower; 31 replays on this side
    let slow = |m: &str| if m == "c.x" { 1.1 } else { 1.0 };
    let test = f.write("test.json", &trace_text(&model(31, 2, &slow, None), ""));
    let d = diff(&[&base], &[&test], &DiffOptions::default()).unwrap();
    assert_eq!((d.by.as_str(), d.by_note.as_deref()), ("module", None));
    let c = &d.pooled;
    assert_eq!((c.base.replays, c.test.replays), (40, 31));
    let cx = row(c, Some("c.x"));
    assert_eq!(cx.verdict, Verdict::Slower);
    let s = cx.shift.unwrap();
    assert!((s.estimate - 2.0).abs() < 0.2 && s.low > 1.5 && s.high < 2.5, "{s:?}");
    assert!((cx.relative().unwrap() - 0.1).abs() < 0.01);
    // the row that accounts for the change comes first and accounts for about all of it
    assert_eq!(c.rows[0].value.as_deref(), Some("c.x"));
    assert!((c.explained.unwrap() - 1.0).abs() < 0.25, "{:?}", c.explained);
    for r in &c.rows[1..] {
        assert_eq!(r.verdict, Verdict::Same, "{:?}", r.value);
    }
    assert_eq!(row(c, None).base.as_ref().unwrap().kernels_per_replay, 1.0);
    assert_eq!(row(c, Some("a")).base.as_ref().unwrap().kernels_per_replay, 2.0);
    // the tree: c.x, its parent c and nothing else changed
    let changed: Vec<&str> =
        c.tree.iter().filter(|r| r.verdict != Verdict::Same).map(|r| r.value.as_deref().unwrap()).collect();
    assert_eq!(changed, ["c", "c.x"]);
    assert!((tree_row(c, "c").shift.unwrap().estimate - 2.0).abs() < 0.3);
    // busy per replay: 125 µs, 2 more in test: +1.6%, below the 2% threshold
    assert_eq!(c.total.verdict, Verdict::Same);
    assert!(c.total.shift.unwrap().low > 0.0);
    let strict = DiffOptions { threshold: 0.01, ..DiffOptions::default() };
    let d = diff(
        &d.base_traces.iter().map(|t| t.path.clone()).collect::<Vec<_>>(),
        &[f.dir.path().join("test.json")],
        &strict,
    )
    .unwrap();
    assert_eq!(d.pooled.total.verdict, Verdict::Slower);
    // the kernel-level line: norm got slower by about 2 µs per replay
    let k = &row(&d.pooled, Some("c.x")).kernels[0];
    assert_eq!((k.name.as_str(), k.side()), ("norm", "both"));
    assert!((k.delta_us() - 2.0).abs() < 0.2 && k.base.0 == 40 && k.test.0 == 31);
}

#[test]
fn a_sure_change_too_small_for_the_replay_is_the_same() {
    // a 0.5 µs kernel 10% slower: 0.05 µs of a 125 µs replay, under 0.1% of it
    let f = Files::new();
    let base =
        f.write("base.json", &trace_text(&model(30, 1, &|_| 1.0, Some((Some("tiny"), "cast", 0.5))), ""));
    let test =
        f.write("test.json", &trace_text(&model(30, 2, &|_| 1.0, Some((Some("tiny"), "cast", 0.55))), ""));
    let d = diff(&[&base], &[&test], &DiffOptions::default()).unwrap();
    let tiny = row(&d.pooled, Some("tiny"));
    assert!(tiny.shift.unwrap().low > 0.0 && tiny.relative().unwrap() > 0.09, "{tiny:?}");
    assert_eq!(tiny.verdict, Verdict::Same);
    let off = DiffOptions { min_change: 0.0, ..DiffOptions::default() };
    let d = diff(&[&base], &[&test], &off).unwrap();
    assert_eq!(row(&d.pooled, Some("tiny")).verdict, Verdict::Slower);
    assert_eq!(tree_row(&d.pooled, "tiny").verdict, Verdict::Slower);
    // a floor above the change of c.x (2 µs, 1.6% of the replay) calls it the same
    let slow = |m: &str| if m == "c.x" { 1.1 } else { 1.0 };
    let test = f.write("slow.json", &trace_text(&model(30, 2, &slow, Some((Some("tiny"), "cast", 0.5))), ""));
    let high = DiffOptions { min_change: 0.02, ..DiffOptions::default() };
    assert_eq!(row(&diff(&[&base], &[&test], &high).unwrap().pooled, Some("c.x")).verdict, Verdict::Same);
    let low = DiffOptions { min_change: 0.01, ..DiffOptions::default() };
    assert_eq!(row(&diff(&[&base], &[&test], &low).unwrap().pooled, Some("c.x")).verdict, Verdict::Slower);
}

#[test]
fn new_and_gone_values_and_kernels() {
    let f = Files::new();
    let base =
        f.write("base.json", &trace_text(&model(10, 1, &|_| 1.0, Some((Some("old"), "copy", 3.0))), ""));
    let test = f.write("test.json.gz", "");
    let text = trace_text(&model(12, 3, &|_| 1.0, Some((Some("a"), "extra", 7.0))), "");
    let mut gz =
        flate2::write::GzEncoder::new(std::fs::File::create(&test).unwrap(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, text.as_bytes()).unwrap();
    gz.finish().unwrap();
    let d = diff(&[&base], &[&test], &DiffOptions::default()).unwrap();
    let c = &d.pooled;
    let old = row(c, Some("old"));
    assert_eq!((old.verdict, old.test.is_none(), old.delta_us().round()), (Verdict::Gone, true, -3.0));
    let a = row(c, Some("a"));
    assert_eq!(a.verdict, Verdict::Slower);
    let extra = &a.kernels[0];
    assert_eq!((extra.name.as_str(), extra.side(), extra.test_per_replay), ("extra", "test", (1.0, 7.0)));
    assert_eq!(a.test.as_ref().unwrap().kernels_per_replay, 3.0);
}

#[test]
fn a_trace_against_itself_is_the_same_and_passes_the_gate() {
    let f = Files::new();
    let t = f.write("t.json", &trace_text(&model(20, 1, &|_| 1.0, None), ""));
    let options = DiffOptions { fail_if_slower: Some(0.0), ..DiffOptions::default() };
    let d = diff(&[&t], &[&t], &options).unwrap();
    assert!(d.pooled.rows.iter().chain(&d.pooled.tree).all(|r| r.verdict == Verdict::Same));
    let s = d.pooled.total.shift.unwrap();
    assert_eq!((s.estimate, d.pooled.mean_delta_us, d.pooled.explained), (0.0, 0.0, None));
    assert_eq!(d.offenders().count(), 0);
}

#[test]
fn the_gate_names_the_total_and_large_values_only() {
    let f = Files::new();
    let base = f.write("base.json", &trace_text(&model(30, 1, &|_| 1.0, Some((Some("tiny"), "k", 1.0))), ""));
    // b 20% slower; tiny (under 1% of the time) twice as slow
    let slow = |m: &str| match m {
        "b" => 1.2,
        "tiny" => 2.0,
        _ => 1.0,
    };
    let test = f.write("test.json", &trace_text(&model(30, 2, &slow, Some((Some("tiny"), "k", 2.0))), ""));
    let gate = |pct: f64| {
        let options = DiffOptions { fail_if_slower: Some(pct), ..DiffOptions::default() };
        let d = diff(&[&base], &[&test], &options).unwrap();
        d.offenders().map(|o| o.value.clone().map(|v| v.unwrap())).collect::<Vec<_>>()
    };
    // total: +6 + 1 of 126 µs = +5.6%
    assert_eq!(gate(0.03), [None, Some("b".to_string())]);
    assert_eq!(gate(0.10), [Some("b".to_string())]);
    assert_eq!(gate(0.30), Vec::<Option<String>>::new());
    let options = DiffOptions { fail_if_slower: Some(0.3), min_share: 0.0, ..DiffOptions::default() };
    let d = diff(&[&base], &[&test], &options).unwrap();
    assert_eq!(d.offenders().map(|o| o.value.clone()).collect::<Vec<_>>(), [Some(Some("tiny".to_string()))]);
}

#[test]
fn ranks_pool_or_compare_apart() {
    let f = Files::new();
    let info =
        |rank: u64| format!(r#""distributedInfo": {{"backend": "nccl", "rank": {rank}, "world_size": 2}}, "#);
    // rank 1's b gets 20% slower; rank 0 unchanged. Ranks from distributedInfo on the
    // base side, from the file names on the test side.
    let base = [
        f.write("b0.json", &trace_text(&model(25, 1, &|_| 1.0, None), &info(0))),
        f.write("b1.json", &trace_text(&model(25, 2, &|_| 1.0, None), &info(1))),
    ];
    let slow = |m: &str| if m == "b" { 1.2 } else { 1.0 };
    let test = [
        f.write("000000.host_1.pt.trace.json", &trace_text(&model(25, 3, &|_| 1.0, None), "")),
        f.write("000001.host_2.pt.trace.json", &trace_text(&model(25, 4, &slow, None), "")),
    ];
    let pooled = diff(&base, &test, &DiffOptions::default()).unwrap();
    assert_eq!((pooled.pooled.base.replays, pooled.pooled.base.traces), (50, 2));
    assert!(pooled.ranks.is_empty());
    assert_eq!(
        pooled
            .base_traces
            .iter()
            .map(|t| t.rank)
            .chain(pooled.test_traces.iter().map(|t| t.rank))
            .collect::<Vec<_>>(),
        [Some(0), Some(1), Some(0), Some(1)]
    );
    let per_rank = diff(&base, &test, &DiffOptions { per_rank: true, ..DiffOptions::default() }).unwrap();
    let verdicts: Vec<(Option<u64>, Verdict)> =
        per_rank.ranks.iter().map(|c| (c.rank, row(c, Some("b")).verdict)).collect();
    assert_eq!(verdicts, [(Some(0), Verdict::Same), (Some(1), Verdict::Slower)]);
    assert_eq!(per_rank.pooled, pooled.pooled);
    // a rank on one side only is left out with a note
    let d = diff(&base, &test[..1], &DiffOptions { per_rank: true, ..DiffOptions::default() }).unwrap();
    assert_eq!(d.ranks.len(), 1);
    assert_eq!(d.notes, ["rank 1 is on the base side only: not compared rank by rank"]);
    // no rank to be had
    let plain = f.write("t.json", &trace_text(&model(5, 1, &|_| 1.0, None), ""));
    let err =
        diff(&[&plain], &[&plain], &DiffOptions { per_rank: true, ..DiffOptions::default() }).unwrap_err();
    assert!(err.contains("t.json: no rank for --per-rank"), "{err}");
}

#[test]
fn keys_both_sides_must_share() {
    let f = Files::new();
    let modules = f.write("m.json", &trace_text(&model(5, 1, &|_| 1.0, None), ""));
    let strip = |text: String| text.replace(r#", "module": "#, r#", "name": "#);
    let names = f.write("n.json", &strip(trace_text(&model(5, 2, &|_| 1.0, None), "")));
    let bare_text = trace_text(&model(5, 3, &|_| 1.0, None), "");
    let bare = f.write("bare.json", &regex_free_strip(&bare_text));
    let err = diff(&[&modules], &[&names], &DiffOptions::default()).unwrap_err();
    assert_eq!(
        err,
        "the base traces carry args.module and the test traces do not (their best key is args.name): annotate both runs alike, or pick the key with --by"
    );
    let by = |key: &str| DiffOptions { by: Some(key.into()), ..DiffOptions::default() };
    let err = diff(&[&names], &[&modules], &by("module")).unwrap_err();
    assert!(err.starts_with("args.module is on the test traces only"), "{err}");
    // by kernel name, both sides have it
    let d = diff(&[&modules], &[&names], &by("kernel")).unwrap();
    assert_eq!(d.pooled.rows.len(), 6);
    assert!(!d.hierarchy.tree && d.pooled.tree.is_empty());
    // the default falls back to args.name, then to kernel names, and says so
    let d = diff(&[&names], &[&names], &DiffOptions::default()).unwrap();
    assert_eq!(
        (d.by.as_str(), d.by_note.as_deref()),
        ("name", Some("no graphed kernel carries args.module"))
    );
    let d = diff(&[&bare], &[&bare], &DiffOptions::default()).unwrap();
    assert_eq!(d.by, "kernel");
    assert_eq!(d.by_note.as_deref(), Some("no graphed kernel carries args.module or args.name"));
    // a key neither side carries: everything is (unannotated), with a note
    let d = diff(&[&bare], &[&bare], &by("stream_name")).unwrap();
    assert_eq!(d.pooled.rows.len(), 1);
    assert_eq!(
        d.by_note.as_deref(),
        Some("no graphed kernel carries args.stream_name: all are (unannotated)")
    );
}

fn regex_free_strip(text: &str) -> String {
    let mut out = text.to_string();
    for m in ["\"a\"", "\"b\"", "\"c.x\"", "\"c.y\""] {
        out = out.replace(&format!(r#", "module": {m}"#), "");
    }
    out
}

#[test]
fn bad_sides_are_one_line() {
    let f = Files::new();
    let good = f.write("good.json", &trace_text(&model(5, 1, &|_| 1.0, None), ""));
    let empty = f.write(
        "empty.json",
        r#"{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "x", "ts": 1, "dur": 1}]}"#,
    );
    let err = diff(&[&good], &[&empty], &DiffOptions::default()).unwrap_err();
    assert_eq!(err, "the test trace has no graphed kernels (work with a graph node id other than 0): diff reads the outputs of cgfast annotate");
    let no_replay = f.write("nr.json", r#"{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "args": {"graph node id": 5}}]}"#);
    let err = diff(&[&no_replay], &[&good], &DiffOptions::default()).unwrap_err();
    assert!(err.contains("base traces' graphed kernels have no args.correlation"), "{err}");
    let missing = f.dir.path().join("missing.json");
    let cut = f.write("cut.json", r#"{"traceEvents": [1,"#);
    let err = diff(&[&good, &missing], &[&cut], &DiffOptions::default()).unwrap_err();
    assert!(err.ends_with("missing.json: no such file (and 1 more traces could not be read)"), "{err}");
}

#[test]
fn rolled_up_values_are_compared_as_one() {
    let f = Files::new();
    let base = f.write("base.json", &trace_text(&model(20, 1, &|_| 1.0, None), ""));
    let slow = |m: &str| if m == "c.y" { 1.5 } else { 1.0 };
    let test = f.write("test.json", &trace_text(&model(20, 2, &slow, None), ""));
    let d = diff(&[&base], &[&test], &DiffOptions { depth: Some(1), ..DiffOptions::default() }).unwrap();
    let c = row(&d.pooled, Some("c"));
    assert_eq!((c.verdict, c.base.as_ref().unwrap().kernels_per_replay), (Verdict::Slower, 2.0));
    assert!((c.shift.unwrap().estimate - 10.0).abs() < 0.5);
    assert!(d.pooled.rows.iter().all(|r| r.value.as_deref() != Some("c.y")));
}

#[test]
fn paths_sort_named_then_numbered() {
    let mut paths = ["m.layers.10", "m.layers.2", "m.embed", "m.layers.x"]
        .map(|p| p.split('.').map(Segment::of).collect::<Vec<_>>());
    paths.sort();
    let joined: Vec<String> =
        paths.iter().map(|p| p.iter().map(|s| s.text.as_str()).collect::<Vec<_>>().join(".")).collect();
    assert_eq!(joined, ["m.embed", "m.layers.x", "m.layers.2", "m.layers.10"]);
}

/// Replays alternating between two graphs (a forward and a backward, say): both hold
/// modules `a` and `b`, the second graph's kernels three times as long.
fn two_graphs(steps: usize, seed: u64, scale_a: f64) -> String {
    let mut rng = Rng(seed);
    let mut events = Vec::new();
    let mut ts = 0.0;
    for step in 0..steps {
        for graph in [2u64, 4] {
            let times = if graph == 2 { [10.0, 20.0] } else { [30.0, 60.0] };
            for (local, (module, us)) in ["a", "b"].iter().zip(times).enumerate() {
                let us =
                    us * if *module == "a" { scale_a } else { 1.0 } * (1.0 + 0.01 * (rng.uniform() - 0.5));
                events.push(format!(
                    r#"{{"ph": "X", "cat": "kernel", "name": "k_{module}", "pid": 0, "tid": 7, "ts": {ts:.3}, "dur": {us:.3}, "args": {{"correlation": {}, "graph node id": {}, "module": "{module}"}}}}"#,
                    1000 + 2 * step + (graph as usize / 4),
                    graph << 32 | local as u64
                ));
                ts += us + 1.0;
            }
            ts += 20.0;
        }
    }
    format!(r#"{{"traceEvents": [{}]}}"#, events.join(",\n"))
}

#[test]
fn several_graphs_are_compared_graph_by_graph() {
    let f = Files::new();
    // a 10% slower in both graphs (+1 µs in the first, +3 in the second); 6 steps a side
    let base = f.write("base.json", &two_graphs(6, 1, 1.0));
    let test = f.write("test.json", &two_graphs(6, 2, 1.1));
    let d = diff(&[&base], &[&test], &DiffOptions::default()).unwrap();
    assert_eq!(d.pooled.graphs, Some(2));
    let a = row(&d.pooled, Some("a"));
    assert!(a.by_graph);
    // each graph half the replays: (1 + 3) / 2 = 2 µs per replay, of (10 + 30) / 2 = 20
    let s = a.shift.unwrap();
    assert!((s.estimate - 2.0).abs() < 0.1 && s.low > 1.5 && s.high < 2.5, "{s:?}");
    assert!((a.base.as_ref().unwrap().median_us - 20.0).abs() < 0.2);
    assert_eq!(a.verdict, Verdict::Slower);
    assert_eq!(row(&d.pooled, Some("b")).verdict, Verdict::Same);
    assert!(d.notes.is_empty());
    // All replays together, the two graphs' times are two humps 20 µs apart: the pooled
    // interval is far wider than the one compared graph by graph.
    let mut pooled_base: Vec<f64> = Vec::new();
    let mut pooled_test: Vec<f64> = Vec::new();
    for (trace, out) in [(&base, &mut pooled_base), (&test, &mut pooled_test)] {
        let (k, _) = key::read_keyed(trace, None, &CancelToken::new(), &mut |_, _| {}).unwrap();
        let r = reduce(trace, &k, "module");
        let a_id = r.values.iter().position(|v| v == "a").unwrap() as u32;
        out.extend(r.cells.iter().filter(|c| c.value == a_id).map(|c| c.attributed_ns / 1e3));
    }
    let plain = crate::summary::diff_stats::shift(&mut pooled_base, &mut pooled_test).unwrap();
    assert!(plain.high - plain.low > 4.0 * (s.high - s.low), "{plain:?} against {s:?}");
    // traces that replay different numbers of graphs are compared all graphs together
    let one = f.write("one.json", &trace_text(&model(12, 3, &|_| 1.0, None), ""));
    let d = diff(&[&base, &one], &[&test, &one], &DiffOptions::default()).unwrap();
    assert_eq!(d.pooled.graphs, None);
    assert!(!row(&d.pooled, Some("a")).by_graph);
    assert_eq!(
        d.notes,
        ["the traces replay different numbers of graphs (base 1 or 2, test 1 or 2): each value's replays are compared all graphs together"]
    );
}
