//! The diff as a chart, self-contained (no scripts, fonts or links to fetch): a
//! diverging bar per value (its shift per replay, test against base, with the 95%
//! interval as a whisker), and for module paths an icicle of the hierarchy coloured by
//! each path's relative change. `.svg` is the bars alone; `.html` adds the icicle
//! above them (where the values have a hierarchy) and a table of every value.

use std::fmt::Write as _;
use std::path::Path;

use super::chart::{chart_kind, escape, human_time, write_atomically, ChartKind};
use super::diff::{Comparison, Diff, DiffRow, Verdict, MIN_RUNS};
use super::hierarchy::{tree, PathNode, ANY_LAYER};
use super::icicle::{fit, hex, text_color, tint, LEVEL_H};
use super::key;
use super::Row;
use crate::Error;

/// Bars drawn; the rest are counted in a line of text.
pub(crate) const MAX_BARS: usize = 40;

const WIDTH: u32 = 1100;
/// Labels end here (right-aligned); the change's text starts after them.
const LABEL_END: u32 = 330;
const TEXT_X: u32 = 342;
/// The plot: its left edge, the axis of no change in its middle, half its width each side.
const PLOT_LEFT: f64 = 520.0;
const HALF: f64 = 275.0;
const AXIS: f64 = PLOT_LEFT + HALF;
const ROW_H: u32 = 24;
const BAR_H: u32 = 14;
const TOP: u32 = 112;

pub(crate) const SLOWER: (u8, u8, u8) = (0xd6, 0x27, 0x28);
pub(crate) const FASTER: (u8, u8, u8) = (0x1f, 0x77, 0xb4);
pub(crate) const SAME: (u8, u8, u8) = (0xba, 0xb0, 0xac);
pub(crate) const NEW: (u8, u8, u8) = (0xf2, 0x8e, 0x2b);
pub(crate) const GONE: (u8, u8, u8) = (0x76, 0xb7, 0xb2);
const WHISKER: &str = "#222222";
/// The icicle's colour is full at this relative change (and beyond).
const FULL_AT: f64 = 0.25;

pub(crate) fn verdict_color(v: Verdict) -> (u8, u8, u8) {
    match v {
        Verdict::Slower => SLOWER,
        Verdict::Faster => FASTER,
        Verdict::Same => SAME,
        Verdict::New => NEW,
        Verdict::Gone => GONE,
    }
}

fn label_of(value: &Option<String>) -> String {
    value.clone().unwrap_or_else(|| "(unannotated)".into())
}

/// Keep the end of a long label, where its most specific part is.
fn shorten(text: &str, max: usize) -> String {
    let n = text.chars().count();
    if n <= max {
        return text.to_string();
    }
    format!("…{}", text.chars().skip(n - (max - 1)).collect::<String>())
}

/// `+12.3 µs`, signed; no sign where it shows as 0.
pub(crate) fn signed_time(us: f64) -> String {
    let shown = human_time(us.abs());
    let zero = shown.trim_end_matches(|c: char| !c.is_ascii_digit()).chars().all(|c| c == '0' || c == '.');
    let sign = if zero {
        ""
    } else if us > 0.0 {
        "+"
    } else {
        "-"
    };
    format!("{sign}{shown}")
}

/// `+4.5%`, signed; `-0.0` shows as `0.0`.
pub fn signed_pct(fraction: f64) -> String {
    let p = fraction * 100.0;
    if !p.is_finite() {
        return if p > 0.0 { "+∞%".into() } else { "-∞%".into() };
    }
    if (p * 10.0).round() == 0.0 {
        "0.0%".into()
    } else {
        format!("{p:+.1}%")
    }
}

/// The interval as text: `[+1.2 µs, +3.4 µs]`, `-∞` and `∞` for ends it has not.
pub(crate) fn interval_text(row: &DiffRow) -> String {
    match row.shift {
        None => "—".into(),
        Some(s) => {
            let end = |x: f64| {
                if x.is_finite() {
                    signed_time(x)
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

impl Comparison {
    /// One line on the change of the busy time per replay, as the table and the chart
    /// say it.
    pub fn total_line(&self) -> String {
        total_line(self)
    }

    /// One line on the runs of each side and what the intervals hold: with one run on a
    /// side, that the spread between runs is not in them and how many runs a side would
    /// measure it.
    pub fn runs_line(&self) -> String {
        let (b, t) = (self.base.runs, self.test.runs);
        let sides = if b == t { format!("{b} a side") } else { format!("base {b}, test {t}") };
        if !self.between_runs() {
            return format!(
                "{sides}: run-to-run variation is not in the intervals (they hold the spread between replays of one process); {MIN_RUNS} or more runs a side (traces of separate processes) would measure it"
            );
        }
        let within = self.rows.iter().filter(|r| r.shift.is_some() && !r.between_runs()).count();
        let within = match within {
            0 => String::new(),
            1 => format!("; 1 value in fewer than {MIN_RUNS} runs of a side: between replays"),
            n => format!("; {n} values in fewer than {MIN_RUNS} runs of a side: between replays"),
        };
        format!("{sides}: each interval holds the spread between runs as well as between replays{within}")
    }
}

/// One line on the change of the busy time per replay.
pub(crate) fn total_line(c: &Comparison) -> String {
    let t = &c.total;
    let (b, s) = (t.base.as_ref().map_or(0.0, |b| b.median_us), t.test.as_ref().map_or(0.0, |s| s.median_us));
    format!(
        "busy per replay: base {}, test {} ({}): {} ({}), 95% interval {}: {}",
        human_time(b),
        human_time(s),
        if t.between_runs() { "means of the runs' medians" } else { "medians" },
        signed_time(t.delta_us()),
        t.relative().map_or("—".into(), signed_pct),
        interval_text(t),
        t.verdict.as_str()
    )
}

fn title(diff: &Diff) -> String {
    format!("Change of GPU time per graph replay by {}: test against base", key::label(&diff.by))
}

/// The bars as an SVG document.
pub(crate) fn svg(diff: &Diff) -> String {
    let c = &diff.pooled;
    let (shown, rest) = c.rows.split_at(c.rows.len().min(MAX_BARS));
    let extent = shown
        .iter()
        .flat_map(|r| {
            let mut ends = vec![r.delta_us().abs()];
            if let Some(s) = r.shift {
                ends.extend([s.low.abs(), s.high.abs()].into_iter().filter(|x| x.is_finite()));
            }
            ends
        })
        .fold(0.0, f64::max);
    let scale = if extent > 0.0 { HALF / extent } else { 0.0 };
    let x_of = |us: f64| (AXIS + us * scale).clamp(PLOT_LEFT, PLOT_LEFT + 2.0 * HALF);
    let note = (!rest.is_empty()).then(|| {
        let total: f64 = rest.iter().map(|r| r.contribution_us).sum();
        format!("… and {} more values, {} of the mean change in all", rest.len(), signed_time(total))
    });
    let height = TOP + ROW_H * (shown.len().max(1) + note.is_some() as usize) as u32 + 34;
    let mut s = String::new();
    let _ = write!(
        s,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="DejaVu Sans, Arial, Helvetica, sans-serif" font-size="13">
<title>{}</title>
<rect width="100%" height="100%" fill="#ffffff"/>
<text x="16" y="30" font-size="19" font-weight="bold" fill="#222">{}</text>
<text x="16" y="54" fill="#555">{}</text>
<text x="16" y="76" fill="#555">{}</text>
"##,
        escape(&title(diff)),
        escape(&title(diff)),
        escape(&total_line(c)),
        escape(&if c.between_runs() {
            format!(
                "bars: each value's change per replay (the mean of its runs' medians); whiskers: its 95% interval between runs; {} base, {} test runs",
                c.base.runs, c.test.runs
            )
        } else {
            format!(
                "bars: each value's Hodges–Lehmann shift per replay; whiskers: its 95% interval; {} base, {} test replays",
                c.base.replays, c.test.replays
            )
        }),
    );
    // legend
    let mut x = 16.0;
    for v in [Verdict::Slower, Verdict::Faster, Verdict::Same, Verdict::New, Verdict::Gone] {
        let _ = write!(
            s,
            r##"<rect x="{x:.0}" y="88" width="12" height="12" fill="{}"/><text x="{:.0}" y="99" fill="#555" font-size="12">{}</text>"##,
            hex(verdict_color(v)),
            x + 16.0,
            v.as_str()
        );
        x += 16.0 + 8.0 * v.as_str().len() as f64 + 18.0;
    }
    s.push('\n');
    for k in [-1.0, -0.5, 0.5, 1.0] {
        let gx = AXIS + k * HALF;
        let _ = writeln!(
            s,
            r##"<line x1="{gx:.1}" y1="{}" x2="{gx:.1}" y2="{}" stroke="#e4e4e4"/><text x="{gx:.1}" y="{}" fill="#999" font-size="11" text-anchor="middle">{}</text>"##,
            TOP - 4,
            height - 28,
            height - 12,
            escape(&signed_time(k * extent))
        );
    }
    for (i, r) in shown.iter().enumerate() {
        let y = TOP + ROW_H * i as u32;
        let mid = y + ROW_H / 2;
        let delta = r.delta_us();
        let (x0, x1) = (x_of(0.0), x_of(delta));
        let (left, w) = (x0.min(x1), (x1 - x0).abs().max(if delta != 0.0 { 1.0 } else { 0.0 }));
        let label = label_of(&r.value);
        let change = match r.relative() {
            Some(p) => format!("{} {}", signed_time(delta), signed_pct(p)),
            None => format!("{} {}", signed_time(delta), r.verdict.as_str()),
        };
        let _ = write!(
            s,
            r##"<g><title>{} — {}: {} per replay ({}), 95% interval {}; base {}, test {}</title><text x="{LABEL_END}" y="{}" text-anchor="end" fill="#222">{}</text><text x="{TEXT_X}" y="{}" fill="#333">{}</text><rect x="{left:.1}" y="{}" width="{w:.1}" height="{BAR_H}" fill="{}"/>"##,
            escape(&label),
            r.verdict.as_str(),
            escape(&signed_time(delta)),
            escape(&r.relative().map_or("—".into(), signed_pct)),
            escape(&interval_text(r)),
            escape(&r.base.as_ref().map_or("—".into(), |b| human_time(b.median_us))),
            escape(&r.test.as_ref().map_or("—".into(), |t| human_time(t.median_us))),
            mid + 5,
            escape(&shorten(&label, 44)),
            mid + 5,
            escape(&change),
            mid - BAR_H / 2,
            hex(verdict_color(r.verdict)),
        );
        if let Some(sh) = r.shift {
            let (a, b) = (x_of(sh.low), x_of(sh.high));
            let _ = write!(
                s,
                r##"<line x1="{a:.1}" y1="{mid}" x2="{b:.1}" y2="{mid}" stroke="{WHISKER}" stroke-width="1.5"/>"##
            );
            for (end, x) in [(sh.low, a), (sh.high, b)] {
                if end.is_finite() {
                    let _ = write!(
                        s,
                        r##"<line x1="{x:.1}" y1="{}" x2="{x:.1}" y2="{}" stroke="{WHISKER}" stroke-width="1.5"/>"##,
                        mid - 5,
                        mid + 5
                    );
                }
            }
        }
        s.push_str("</g>\n");
    }
    if let Some(note) = note {
        let _ = writeln!(
            s,
            r##"<text x="{TEXT_X}" y="{}" fill="#555" font-style="italic">{}</text>"##,
            TOP + ROW_H * shown.len() as u32 + 16,
            escape(&note)
        );
    }
    if shown.is_empty() {
        let _ = writeln!(s, r##"<text x="{TEXT_X}" y="{}" fill="#555">no values</text>"##, TOP + 16);
    }
    let _ = writeln!(
        s,
        r##"<line x1="{AXIS}" y1="{}" x2="{AXIS}" y2="{}" stroke="#555"/>"##,
        TOP - 4,
        height - 28
    );
    s.push_str("</svg>\n");
    s
}

// ---------------------------------------------------------------------------- icicle

const ICICLE_TOP: u32 = 84;
const ICICLE_LEFT: f64 = 16.0;
const ICICLE_W: f64 = WIDTH as f64 - 2.0 * ICICLE_LEFT;

/// White to `c` as `amount` goes from 0 to 1.
fn toward(c: (u8, u8, u8), amount: f64) -> (u8, u8, u8) {
    tint(c, 1.0 - amount.clamp(0.0, 1.0))
}

/// The icicle's colour of a path: neutral where it is `same`, else its verdict's colour,
/// deeper the larger its relative change.
pub(crate) fn change_color(row: Option<&DiffRow>) -> (u8, u8, u8) {
    let Some(row) = row else { return (0xee, 0xee, 0xee) };
    match row.verdict {
        Verdict::Same => (0xe6, 0xe6, 0xe6),
        Verdict::New | Verdict::Gone => verdict_color(row.verdict),
        v => {
            let change = row.relative().unwrap_or(0.0).abs();
            toward(verdict_color(v), 0.3 + 0.7 * (change / FULL_AT).min(1.0))
        }
    }
}

struct Layout<'a> {
    out: String,
    scale: f64,
    rows: &'a rustc_hash::FxHashMap<String, &'a DiffRow>,
    unannotated: Option<&'a DiffRow>,
}

impl Layout<'_> {
    fn node(&mut self, n: &PathNode, x: f64, level: usize) {
        let w = n.total_us * self.scale;
        if w < 0.5 {
            return;
        }
        let row = if n.unannotated { self.unannotated } else { self.rows.get(&n.path).copied() };
        let fill = if level == 0 { (0x4a, 0x55, 0x68) } else { change_color(row) };
        let shown = if n.name == ANY_LAYER { "* (layers)".to_string() } else { n.name.clone() };
        let (labels, tooltip) = match (level, row) {
            (0, _) => (vec!["all graphed kernels".to_string()], "all graphed kernels".to_string()),
            (_, Some(r)) => {
                let change = r.relative().map_or(r.verdict.as_str().to_string(), signed_pct);
                (
                    vec![format!("{shown} {change}"), shown.clone()],
                    format!(
                        "{} — {}: {} per replay ({}), 95% interval {}; base {}, test {}",
                        label_of(&r.value),
                        r.verdict.as_str(),
                        signed_time(r.delta_us()),
                        r.relative().map_or("—".into(), signed_pct),
                        interval_text(r),
                        r.base.as_ref().map_or("—".into(), |b| human_time(b.median_us)),
                        r.test.as_ref().map_or("—".into(), |t| human_time(t.median_us)),
                    ),
                )
            }
            (_, None) => (vec![shown.clone()], n.path.clone()),
        };
        let y = ICICLE_TOP + LEVEL_H * level as u32;
        let (left, right) = (x.round(), (x + w).round());
        if right - left >= 1.0 {
            let _ = write!(
                self.out,
                r##"<g><title>{}</title><rect x="{left:.0}" y="{y}" width="{:.0}" height="{}" fill="{}"/>"##,
                escape(&tooltip),
                (right - left - 1.0).max(1.0),
                LEVEL_H - 2,
                hex(fill)
            );
            if let Some(label) = fit(&labels, w, true) {
                let _ = write!(
                    self.out,
                    r##"<text x="{:.2}" y="{}" fill="{}">{}</text>"##,
                    left + 4.0,
                    y + LEVEL_H / 2 + 3,
                    text_color(fill),
                    escape(&label)
                );
            }
            self.out.push_str("</g>\n");
        }
        let mut at = x;
        for c in &n.children {
            self.node(c, at, level + 1);
            at += c.total_us * self.scale;
        }
    }
}

/// The icicle as an SVG document: each path as wide as its mean time per replay (the
/// mean of base and test), coloured by its change.
pub(crate) fn icicle(diff: &Diff) -> String {
    let c = &diff.pooled;
    let width_of = |r: &DiffRow| {
        (r.base.as_ref().map_or(0.0, |b| b.mean_all_us) + r.test.as_ref().map_or(0.0, |t| t.mean_all_us))
            / 2.0
    };
    let rows: Vec<Row> = c
        .rows
        .iter()
        .map(|r| Row {
            value: r.value.clone(),
            kernels: 0,
            total_us: 0.0,
            mean_us: 0.0,
            busy_us: 0.0,
            attributed_us: width_of(r),
            share: 0.0,
            top_kernels: Vec::new(),
            per_replay: None,
        })
        .collect();
    let root = tree(&rows, 0.0);
    let height = ICICLE_TOP + LEVEL_H * root.height() as u32 + 34;
    let by_path: rustc_hash::FxHashMap<String, &DiffRow> =
        c.tree.iter().filter_map(|r| Some((r.value.clone()?, r))).collect();
    let unannotated = c.rows.iter().find(|r| r.value.is_none());
    let mut layout = Layout {
        out: String::new(),
        scale: if root.total_us > 0.0 { ICICLE_W / root.total_us } else { 0.0 },
        rows: &by_path,
        unannotated,
    };
    layout.node(&root, ICICLE_LEFT, 0);
    let mut notes = vec![
        "each path as wide as its time per replay (mean of both sides), coloured by its change".to_string(),
        format!("full colour at ±{:.0}%; grey: the same within noise and the threshold", FULL_AT * 100.0),
    ];
    if let Some(depth) = diff.hierarchy.depth {
        notes.insert(0, format!("rolled up to {depth} level{}", if depth == 1 { "" } else { "s" }));
    }
    if diff.hierarchy.group_layers {
        notes.insert(0, "numbered layers merged as *".into());
    }
    // the scale of the colours, under the cells
    let mut legend = String::new();
    let ly = height - 22;
    for k in 0..=20 {
        let change = (k as f64 - 10.0) / 10.0 * FULL_AT;
        let color = if change > 0.0 {
            toward(SLOWER, 0.3 + 0.7 * (change / FULL_AT))
        } else if change < 0.0 {
            toward(FASTER, 0.3 + 0.7 * (-change / FULL_AT))
        } else {
            (0xe6, 0xe6, 0xe6)
        };
        let _ = write!(
            legend,
            r##"<rect x="{}" y="{ly}" width="12" height="10" fill="{}"/>"##,
            16 + 12 * k,
            hex(color)
        );
    }
    let _ = write!(
        legend,
        r##"<text x="{}" y="{}" fill="#555" font-size="11">faster -{p:.0}% … slower +{p:.0}%</text>"##,
        16 + 12 * 21 + 8,
        ly + 9,
        p = FULL_AT * 100.0
    );
    format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="DejaVu Sans, Arial, Helvetica, sans-serif" font-size="12">
<rect width="100%" height="100%" fill="#ffffff"/>
<text x="16" y="30" font-size="19" font-weight="bold" fill="#222">{}</text>
<text x="16" y="54" font-size="13" fill="#555">{}</text>
{}{legend}
</svg>
"##,
        escape(&format!("The {} hierarchy, coloured by change", key::label(&diff.by))),
        escape(&notes.join("; ")),
        layout.out
    )
}

/// The icicle (where the values have a hierarchy), the bars, and a table of every value
/// with the kernels that changed most, as one HTML page.
pub(crate) fn html(diff: &Diff) -> String {
    let c = &diff.pooled;
    let mut s = format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title>\n<style>\nbody {{ font-family: 'DejaVu Sans', Arial, Helvetica, sans-serif; margin: 16px; color: #222; }}\ntable {{ border-collapse: collapse; font-size: 13px; margin-top: 16px; }}\nth, td {{ padding: 3px 10px; border-bottom: 1px solid #e4e4e4; text-align: right; vertical-align: top; }}\nth:first-child, td:first-child, td.kernels {{ text-align: left; }}\ntd.kernels {{ color: #555; max-width: 480px; overflow-wrap: anywhere; }}\np.note {{ color: #555; margin: 4px 0; }}\n</style></head><body>\n",
        escape(&title(diff))
    );
    if let Some(note) = &diff.by_note {
        let _ = writeln!(s, "<p class=\"note\">{}</p>", escape(note));
    }
    for note in &diff.notes {
        let _ = writeln!(s, "<p class=\"note\">{}</p>", escape(note));
    }
    if diff.hierarchy.tree {
        s.push_str(&icicle(diff));
    }
    s.push_str(&svg(diff));
    s.push_str("<table><thead><tr><th>value</th><th>verdict</th><th>kernels/replay</th><th>base/replay</th><th>test/replay</th><th>change</th><th>95% interval</th><th>of the change</th><th>kernels that changed most</th></tr></thead><tbody>\n");
    for r in &c.rows {
        let kernels = |side: Option<&super::diff::SideStats>| {
            side.map_or("—".into(), |s| format!("{:.0}", s.kernels_per_replay))
        };
        let changed: Vec<String> = r
            .kernels
            .iter()
            .filter(|k| k.delta_us() != 0.0)
            .take(5)
            .map(|k| format!("{} ({}, {})", escape(&k.name), k.side(), escape(&signed_time(k.delta_us()))))
            .collect();
        let _ = writeln!(
            s,
            "<tr><td>{}</td><td>{}</td><td>{} → {}</td><td>{}</td><td>{}</td><td>{} {}</td><td>{}</td><td>{}</td><td class=\"kernels\">{}</td></tr>",
            escape(&label_of(&r.value)),
            r.verdict.as_str(),
            kernels(r.base.as_ref()),
            kernels(r.test.as_ref()),
            escape(&r.base.as_ref().map_or("—".into(), |b| human_time(b.median_us))),
            escape(&r.test.as_ref().map_or("—".into(), |t| human_time(t.median_us))),
            escape(&signed_time(r.delta_us())),
            escape(&r.relative().map_or(String::new(), signed_pct)),
            escape(&interval_text(r)),
            if c.mean_delta_us != 0.0 { signed_pct(r.contribution_us / c.mean_delta_us) } else { "—".into() },
            changed.join("<br>")
        );
    }
    s.push_str("</tbody></table>\n</body></html>\n");
    s
}

/// The chart's text for `path`: `.svg` the bars, `.html`/`.htm` the page.
pub(crate) fn render(path: &Path, diff: &Diff) -> Result<String, Error> {
    match chart_kind(path)? {
        ChartKind::Svg => Ok(svg(diff)),
        ChartKind::Html => Ok(html(diff)),
    }
}

/// Write the chart of `diff` to `path`.
pub fn write(path: &Path, diff: &Diff) -> Result<(), Error> {
    write_atomically(path, &render(path, diff)?)
}
