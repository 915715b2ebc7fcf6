//! The summary as a chart: horizontal bars of attributed GPU time, largest first, in
//! a self-contained SVG or HTML file (no scripts, fonts or links to fetch).

use std::fmt::Write as _;
use std::path::Path;

use super::efficiency::Efficiency;
use super::{Row, Summary};
use crate::Error;

/// Bars drawn; the rest are summed up in a line of text.
pub(crate) const MAX_BARS: usize = 40;

const WIDTH: u32 = 1100;
const LABEL_W: u32 = 380;
const BAR_W: u32 = 500;
const ROW_H: u32 = 22;
const TOP: u32 = 92;
pub(crate) const BAR_COLOR: &str = "#4e79a7";
pub(crate) const UNANNOTATED_COLOR: &str = "#bab0ac";

pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// A time in µs, in the unit that reads best.
pub(crate) fn human_time(us: f64) -> String {
    if us < 1e3 {
        format!("{us:.1} µs")
    } else if us < 1e6 {
        format!("{:.2} ms", us / 1e3)
    } else {
        format!("{:.3} s", us / 1e6)
    }
}

/// Keep the end of a long label, where its most specific part is.
pub(crate) fn shorten(text: &str, max: usize) -> String {
    let n = text.chars().count();
    if n <= max {
        return text.to_string();
    }
    let tail: String = text.chars().skip(n - (max - 1)).collect();
    format!("…{tail}")
}

struct Bar {
    label: String,
    title: String,
    us: f64,
    share: f64,
    kernels: u64,
    color: &'static str,
}

fn bar(r: &Row) -> Bar {
    Bar {
        label: shorten(r.value.as_deref().unwrap_or("(unannotated)"), 52),
        title: r.value.clone().unwrap_or_else(|| "graphed kernels without the key".into()),
        us: r.attributed_us,
        share: r.share,
        kernels: r.kernels,
        color: if r.value.is_none() { UNANNOTATED_COLOR } else { BAR_COLOR },
    }
}

/// The rows past [`MAX_BARS`], as one line of text (a bar for their sum would dwarf
/// the others).
fn rest_note(rest: &[Row]) -> Option<String> {
    if rest.is_empty() {
        return None;
    }
    let us: f64 = rest.iter().map(|r| r.attributed_us).sum();
    let share: f64 = rest.iter().map(|r| r.share).sum();
    Some(format!("… and {} more values, {} · {:.1}% in all", rest.len(), human_time(us), share * 100.0))
}

fn headline(summary: &Summary) -> (String, String) {
    let t = summary.totals();
    let count = |n: u64, what: &str| if n == 1 { format!("1 {what}") } else { format!("{n} {what}s") };
    let title = format!("GPU time of graph replays by {}", super::key::label(&summary.by));
    let subtitle = format!(
        "{}, {} in {}; busy {} (overlaps counted once); {:.1}% annotated",
        count(t.traces, "trace"),
        count(t.kernels, "graphed kernel"),
        count(t.replays, "replay"),
        human_time(t.busy_us),
        t.coverage * 100.0
    );
    (title, subtitle)
}

/// The chart as an SVG document.
pub(crate) fn svg(summary: &Summary, rows: &[Row]) -> String {
    let (shown, rest) = rows.split_at(rows.len().min(MAX_BARS));
    let bars: Vec<Bar> = shown.iter().map(bar).collect();
    let note = rest_note(rest);
    let height = TOP + ROW_H * (bars.len().max(1) + note.is_some() as usize) as u32 + 30;
    let longest = bars.iter().map(|b| b.us).fold(0.0, f64::max);
    let (title, subtitle) = headline(summary);
    let mut s = String::new();
    let _ = write!(
        s,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="DejaVu Sans, Arial, Helvetica, sans-serif" font-size="13">
<title>{}</title>
<rect width="100%" height="100%" fill="#ffffff"/>
<text x="16" y="30" font-size="19" font-weight="bold" fill="#222">{}</text>
<text x="16" y="54" fill="#555">{}</text>
<text x="{}" y="{}" fill="#777" font-size="11" text-anchor="end">share of busy time (each instant split among the kernels running)</text>
"##,
        escape(&title),
        escape(&title),
        escape(&subtitle),
        LABEL_W + BAR_W,
        TOP - 8
    );
    for quarter in 1..=4 {
        let x = LABEL_W as f64 + BAR_W as f64 * quarter as f64 / 4.0;
        let _ = writeln!(
            s,
            r##"<line x1="{x:.1}" y1="{}" x2="{x:.1}" y2="{}" stroke="#e4e4e4"/>"##,
            TOP - 4,
            height - 26
        );
        let _ = writeln!(
            s,
            r##"<text x="{x:.1}" y="{}" fill="#999" font-size="11" text-anchor="middle">{}</text>"##,
            height - 12,
            escape(&human_time(longest * quarter as f64 / 4.0))
        );
    }
    for (k, b) in bars.iter().enumerate() {
        let y = TOP + ROW_H * k as u32;
        let w = if longest > 0.0 {
            (b.us / longest * BAR_W as f64).max(if b.us > 0.0 { 1.0 } else { 0.0 })
        } else {
            0.0
        };
        let _ = writeln!(
            s,
            r##"<g><title>{} — {} ({:.1}%), {} kernels</title><text x="{}" y="{}" text-anchor="end" fill="#222">{}</text><rect x="{LABEL_W}" y="{}" width="{w:.1}" height="{}" fill="{}"/><text x="{:.1}" y="{}" fill="#333">{} · {:.1}%</text></g>"##,
            escape(&b.title),
            escape(&human_time(b.us)),
            b.share * 100.0,
            b.kernels,
            LABEL_W - 8,
            y + 15,
            escape(&b.label),
            y + 3,
            ROW_H - 6,
            b.color,
            LABEL_W as f64 + w + 6.0,
            y + 15,
            escape(&human_time(b.us)),
            b.share * 100.0
        );
    }
    if let Some(note) = note {
        let _ = writeln!(
            s,
            r##"<text x="{}" y="{}" fill="#555" font-style="italic">{}</text>"##,
            LABEL_W + 6,
            TOP + ROW_H * bars.len() as u32 + 15,
            escape(&note)
        );
    }
    let _ = writeln!(
        s,
        r##"<line x1="{LABEL_W}" y1="{}" x2="{LABEL_W}" y2="{}" stroke="#555"/>"##,
        TOP - 4,
        height - 26
    );
    s.push_str("</svg>\n");
    s
}

/// The chart and a table of every value, as one HTML page; the roofline above them
/// with `efficiency`.
pub(crate) fn html(summary: &Summary, rows: &[Row], efficiency: Option<&Efficiency>) -> String {
    let (title, _) = headline(summary);
    let mut s = format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title>\n<style>\nbody {{ font-family: 'DejaVu Sans', Arial, Helvetica, sans-serif; margin: 16px; color: #222; }}\ntable {{ border-collapse: collapse; font-size: 13px; margin-top: 16px; }}\nth, td {{ padding: 3px 10px; border-bottom: 1px solid #e4e4e4; text-align: right; }}\nth:first-child, td:first-child, td.kernels {{ text-align: left; }}\ntd.kernels {{ color: #555; max-width: 520px; overflow-wrap: anywhere; }}\n</style></head><body>\n",
        escape(&title)
    );
    if let Some(roofline) = efficiency.and_then(super::roofline::svg) {
        s.push_str(&roofline);
    }
    if summary.hierarchy.tree {
        s.push_str(&super::icicle::svg(summary, rows).0);
    }
    s.push_str(&svg(summary, rows));
    s.push_str(
        "<table><thead><tr><th>value</th><th>kernels</th><th>total</th><th>mean</th><th>own busy</th><th>share</th><th>top kernels</th></tr></thead><tbody>\n",
    );
    for r in rows {
        let top: Vec<String> = r
            .top_kernels
            .iter()
            .map(|(name, n)| {
                format!("{} ({}×, {})", escape(name), n.kernels, escape(&human_time(n.total_ns as f64 / 1e3)))
            })
            .collect();
        let _ = writeln!(
            s,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.1}%</td><td class=\"kernels\">{}</td></tr>",
            escape(r.value.as_deref().unwrap_or("(unannotated)")),
            r.kernels,
            escape(&human_time(r.total_us)),
            escape(&human_time(r.mean_us)),
            escape(&human_time(r.busy_us)),
            r.share * 100.0,
            top.join("<br>")
        );
    }
    s.push_str("</tbody></table>\n</body></html>\n");
    s
}

/// Write the chart to `path`: HTML for `.html`/`.htm` (with a roofline chart for
/// `efficiency`), SVG for `.svg`.
pub fn write(
    path: &Path,
    summary: &Summary,
    rows: &[Row],
    efficiency: Option<&Efficiency>,
) -> Result<(), Error> {
    let text = match chart_kind(path)? {
        ChartKind::Svg if summary.hierarchy.tree => {
            super::icicle::with_bars(summary, rows, &svg(summary, rows))
        }
        ChartKind::Svg => svg(summary, rows),
        ChartKind::Html => html(summary, rows, efficiency),
    };
    write_atomically(path, &text)
}

/// What a chart's file name asks for.
pub(crate) enum ChartKind {
    Svg,
    Html,
}

/// Whether `path` names a chart cgfast draws (`.svg`, `.html` or `.htm`), for a caller
/// to check before it reads any trace.
pub fn check_chart(path: &Path) -> Result<(), Error> {
    chart_kind(path).map(|_| ())
}

/// What `path` asks for, or the one line saying it is neither.
pub(crate) fn chart_kind(path: &Path) -> Result<ChartKind, Error> {
    let ext = path.extension().map(|e| e.to_string_lossy().to_ascii_lowercase()).unwrap_or_default();
    match ext.as_str() {
        "svg" => Ok(ChartKind::Svg),
        "html" | "htm" => Ok(ChartKind::Html),
        _ => Err(Error::Inputs {
            message: format!("{}: the chart must be a .svg or .html file", path.display()),
        }),
    }
}

/// Write `text` to `path` whole or not at all: a temporary file beside it, renamed over
/// it, so a failed run leaves an existing file as it was.
pub(crate) fn write_atomically(path: &Path, text: &str) -> Result<(), Error> {
    use std::io::Write;
    let fail = |e: std::io::Error| Error::write(path, e);
    let file = crate::write::atomic_file::AtomicFile::create(path).map_err(fail)?;
    file.file().write_all(text.as_bytes()).map_err(fail)?;
    file.commit().map_err(fail)
}
