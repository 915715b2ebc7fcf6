//! The diff as aligned text, as CSV and as JSON.

use std::io::Write;

use cgfast_core::{
    key_label, signed_pct, Comparison, Diff, DiffRow, KernelChange, SideStats, Verdict,
    DIFF_CONFIDENCE as CONFIDENCE, DIFF_RESAMPLES as RESAMPLES, KERNEL_KEY,
};

use crate::annotate::thousands;
use crate::summary_table::{clip, clip_start, csv_field, print_columns, short_kernel_name};

const UNANNOTATED: &str = "(unannotated)";

fn count(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{} {what}s", thousands(n as u64))
    }
}

fn us(x: f64) -> String {
    format!("{x:.2}")
}

fn signed_us(x: f64) -> String {
    if (x * 100.0).round() == 0.0 {
        "0.00".into()
    } else {
        format!("{x:+.2}")
    }
}

fn kernels_per_replay(r: &DiffRow) -> String {
    let side = |s: Option<&SideStats>| s.map_or("—".to_string(), |s| format!("{}", s.kernels_per_replay));
    let (b, t) = (side(r.base.as_ref()), side(r.test.as_ref()));
    if b == t {
        b
    } else {
        format!("{b} → {t}")
    }
}

fn interval_us(r: &DiffRow) -> String {
    match r.shift {
        None => "—".into(),
        Some(s) => {
            let end = |x: f64| {
                if x.is_finite() {
                    signed_us(x)
                } else if x > 0.0 {
                    "∞".into()
                } else {
                    "-∞".into()
                }
            };
            format!("[{}, {}]", end(s.low), end(s.high))
        }
    }
}

/// A side's time per replay and the standard deviation over its replays.
fn time_and_spread(s: &SideStats) -> String {
    format!("{} ±{:.2}", us(s.median_us), s.spread.stdev)
}

/// The cells of a row.
fn cells(r: &DiffRow, c: &Comparison) -> Vec<String> {
    vec![
        clip_start(r.value.as_deref().unwrap_or(UNANNOTATED), 60),
        r.verdict.as_str().to_string(),
        kernels_per_replay(r),
        r.base.as_ref().map_or("—".into(), time_and_spread),
        r.test.as_ref().map_or("—".into(), time_and_spread),
        signed_us(r.delta_us()),
        r.relative().map_or("—".into(), signed_pct),
        interval_us(r),
        if c.mean_delta_us != 0.0 { signed_pct(r.contribution_us / c.mean_delta_us) } else { "—".into() },
    ]
}

/// The kernel line of a value: what appeared, went or changed, per replay of the value.
fn kernel_line(k: &KernelChange) -> String {
    let name = clip(&short_kernel_name(&k.name), 60);
    let per = |(n, us): (f64, f64)| format!("{} × {} µs", trim(n), self::us(us));
    match k.side() {
        "test" => format!("+ {name}: new, {}", per(k.test_per_replay)),
        "base" => format!("- {name}: gone, {}", per(k.base_per_replay)),
        _ => {
            let counts = if k.base_per_replay.0 == k.test_per_replay.0 {
                String::new()
            } else {
                format!(", {} → {} per replay", trim(k.base_per_replay.0), trim(k.test_per_replay.0))
            };
            format!(
                "~ {name}: {} → {} µs ({}){counts}",
                us(k.base_per_replay.1),
                us(k.test_per_replay.1),
                signed_us(k.delta_us())
            )
        }
    }
}

/// `2`, or `1.5`: a count per replay without needless decimals.
fn trim(x: f64) -> String {
    let text = format!("{x:.2}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn comparison_table(out: &mut impl Write, diff: &Diff, c: &Comparison, top: usize, all: bool) {
    let changed = |r: &&DiffRow| all || r.verdict != Verdict::Same;
    let listed: Vec<&DiffRow> = c.rows.iter().filter(changed).collect();
    let _ = writeln!(out, "  total          {}", c.total_line());
    let word = if all { "not the same" } else { "listed" };
    let flagged = c.rows.iter().filter(|r| r.verdict != Verdict::Same).count();
    match c.explained {
        Some(share) if flagged > 0 => {
            let _ = writeln!(
                out,
                "  explained      the {} {word} account for {} of the change of the mean busy time per replay ({} µs)",
                count(flagged, "value"),
                signed_pct(share).trim_start_matches('+'),
                signed_us(c.mean_delta_us)
            );
        }
        _ => {}
    }
    if !diff.options.pool_runs {
        let _ = writeln!(out, "  runs           {}", c.runs_line());
    }
    let _ = writeln!(out);
    if listed.is_empty() {
        let _ = writeln!(
            out,
            "  no value changed: every value's interval holds 0 or its change is {}",
            same_when(diff)
        );
    } else {
        let by = if diff.by == KERNEL_KEY { "kernel" } else { diff.by.as_str() };
        let (headers, left) = columns(by);
        let mut table = Vec::new();
        let mut kernel_rows = Vec::new();
        for r in &listed {
            table.push(cells(r, c));
            let lines: Vec<String> = if r.verdict == Verdict::Same {
                Vec::new()
            } else {
                r.kernels.iter().filter(|k| k.delta_us() != 0.0).take(top).map(kernel_line).collect()
            };
            kernel_rows.push(lines);
        }
        // the kernel lines go under their value, outside the columns
        let mut text = Vec::new();
        print_columns(&mut text, &headers, &left, &table);
        let text = String::from_utf8(text).expect("UTF-8");
        let mut lines = text.lines();
        let _ = writeln!(out, "{}", lines.next().unwrap_or(""));
        for (line, kernels) in lines.zip(&kernel_rows) {
            let _ = writeln!(out, "{line}");
            for k in kernels {
                let _ = writeln!(out, "      {k}");
            }
        }
    }
    let same = c.rows.len() - flagged;
    if !all && same > 0 && !listed.is_empty() {
        let _ = writeln!(out, "  ({} the same; --all lists them)", count(same, "value"));
    }
    let paths: Vec<&DiffRow> = c.tree.iter().filter(changed).collect();
    if !paths.is_empty() {
        let _ = writeln!(out);
        let _ = writeln!(out, "  every path with the paths under it:");
        let (headers, left) = columns("path");
        let table: Vec<Vec<String>> = paths.iter().map(|r| cells(r, c)).collect();
        print_columns(out, &headers, &left, &table);
    }
}

pub fn print_table(diff: &Diff, top: usize, all: bool) {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let c = &diff.pooled;
    let note = diff.by_note.as_ref().map_or(String::new(), |n| format!(" ({n})"));
    let _ = writeln!(
        out,
        "cgfast diff by {}{note}: base {}, {}; test {}, {}",
        key_label(&diff.by),
        count(c.base.traces, "trace"),
        count(c.base.replays, "replay"),
        count(c.test.traces, "trace"),
        count(c.test.replays, "replay"),
    );
    if diff.hierarchy.rolls_up() {
        let mut how = Vec::new();
        if let Some(depth) = diff.hierarchy.depth {
            how.push(format!(
                "rolled up to their first {depth} dotted segment{}",
                if depth == 1 { "" } else { "s" }
            ));
        }
        if diff.hierarchy.group_layers {
            how.push("numbered layers merged as *".to_string());
        }
        let _ = writeln!(out, "  values         {}", how.join("; "));
    }
    let method = if c.between_runs() {
        format!(
            "the change of the mean of the runs' median times per replay, {:.0}% interval from a hierarchical bootstrap (runs, then replays within them; {} resamples) and Student's t",
            CONFIDENCE * 100.0,
            thousands(RESAMPLES as u64)
        )
    } else {
        format!(
            "the Hodges-Lehmann shift of the times per replay, {:.0}% interval from the Mann-Whitney distribution",
            CONFIDENCE * 100.0
        )
    };
    let _ = writeln!(
        out,
        "  method         {method}; same: the interval holds 0 or the change is {}",
        same_when(diff)
    );
    for note in &diff.notes {
        let _ = writeln!(out, "  note           {note}");
    }
    comparison_table(&mut out, diff, c, top, all);
    for r in &diff.ranks {
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "rank {}: base {}, {}; test {}, {}",
            r.rank.map_or("?".into(), |r| r.to_string()),
            count(r.base.traces, "trace"),
            count(r.base.replays, "replay"),
            count(r.test.traces, "trace"),
            count(r.test.replays, "replay"),
        );
        comparison_table(&mut out, diff, r, top, all);
    }
}

const CSV_COLUMNS: [&str; 20] = [
    "kind",
    "value",
    "verdict",
    "base_replays",
    "test_replays",
    "base_kernels_per_replay",
    "test_kernels_per_replay",
    "base_us",
    "test_us",
    "base_stdev_us",
    "test_stdev_us",
    "delta_us",
    "delta_pct",
    "ci_low_us",
    "ci_high_us",
    "ci_low_pct",
    "ci_high_pct",
    "contribution_us",
    "share_of_difference",
    "base_share",
];

fn number(x: Option<f64>, decimals: usize) -> String {
    match x {
        Some(x) if x.is_finite() => {
            let text = format!("{x:.decimals$}");
            let text = text.trim_end_matches('0').trim_end_matches('.');
            if text == "-0" {
                "0".into()
            } else {
                text.to_string()
            }
        }
        _ => String::new(),
    }
}

fn csv_row(kind: &str, r: &DiffRow, c: &Comparison) -> Vec<String> {
    let b = r.base.as_ref();
    let t = r.test.as_ref();
    let interval = r.relative_interval();
    vec![
        kind.to_string(),
        csv_field(r.value.as_deref().unwrap_or("")),
        r.verdict.as_str().to_string(),
        b.map_or(0, |b| b.spread.count).to_string(),
        t.map_or(0, |t| t.spread.count).to_string(),
        number(b.map(|b| b.kernels_per_replay), 3),
        number(t.map(|t| t.kernels_per_replay), 3),
        number(b.map(|b| b.median_us), 3),
        number(t.map(|t| t.median_us), 3),
        number(b.map(|b| b.spread.stdev), 3),
        number(t.map(|t| t.spread.stdev), 3),
        number(Some(r.delta_us()), 3),
        number(r.relative().map(|x| x * 100.0), 4),
        number(r.shift.map(|s| s.low), 3),
        number(r.shift.map(|s| s.high), 3),
        number(interval.map(|i| i.0 * 100.0), 4),
        number(interval.map(|i| i.1 * 100.0), 4),
        number(Some(r.contribution_us), 3),
        number((c.mean_delta_us != 0.0).then(|| r.contribution_us / c.mean_delta_us), 6),
        number(Some(r.base_share), 6),
    ]
}

/// A line for the total, each value and each path (`kind`: total, value, path); with
/// `--per-rank`, a first column `rank` (empty for the pooled lines).
pub fn print_csv(diff: &Diff) {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let per_rank = diff.options.per_rank;
    let mut header: Vec<&str> = CSV_COLUMNS.to_vec();
    if per_rank {
        header.insert(0, "rank");
    }
    let _ = writeln!(out, "{}", header.join(","));
    for c in std::iter::once(&diff.pooled).chain(&diff.ranks) {
        let lines = std::iter::once(("total", &c.total))
            .chain(c.rows.iter().map(|r| ("value", r)))
            .chain(c.tree.iter().map(|r| ("path", r)));
        for (kind, r) in lines {
            let mut cells = csv_row(kind, r, c);
            if per_rank {
                cells.insert(0, c.rank.map_or(String::new(), |r| r.to_string()));
            }
            let _ = writeln!(out, "{}", cells.join(","));
        }
    }
}

pub fn print_json(diff: &Diff, throughput: Option<serde_json::Value>) {
    let mut report = diff.to_json();
    if let Some(throughput) = throughput {
        report["throughput"] = throughput;
    }
    let text = serde_json::to_string_pretty(&report).expect("JSON of a report");
    let _ = writeln!(std::io::stdout().lock(), "{text}");
}

/// The columns of a table of rows (values or paths, named by `first`), and which are
/// aligned left.
fn columns(first: &str) -> ([&str; 9], [bool; 9]) {
    let headers = [
        first,
        "verdict",
        "kernels/replay",
        "base µs ±sd",
        "test µs ±sd",
        "change µs",
        "change",
        "95% interval µs",
        "of change",
    ];
    let mut left = [false; 9];
    (left[0], left[1]) = (true, true);
    (headers, left)
}

/// The sizes under which a change is `same`, in words.
fn same_when(diff: &Diff) -> String {
    let o = &diff.options;
    if o.min_change > 0.0 {
        format!(
            "under {:.1}% of the value or under {}% of the busy time per replay",
            o.threshold * 100.0,
            number(Some(o.min_change * 100.0), 3)
        )
    } else {
        format!("under {:.1}%", o.threshold * 100.0)
    }
}
