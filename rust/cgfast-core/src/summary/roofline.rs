//! The efficiency report as a roofline chart (SVG, for the HTML page): a point per value
//! at its arithmetic intensity and achieved TFLOP/s, its area by its counted time, on
//! log–log axes under the GPU's two roofs (memory bandwidth and FLOP peak).

use std::fmt::Write as _;

use super::chart::{escape, human_time};
use super::efficiency::{Efficiency, EfficiencyRow};
use super::peaks::DtypeClass;

const WIDTH: f64 = 1100.0;
const HEIGHT: f64 = 560.0;
const LEFT: f64 = 90.0;
const RIGHT: f64 = 760.0;
const TOP: f64 = 70.0;
const BOTTOM: f64 = 500.0;
pub(crate) const POINT_COLOR: &str = "#e15759";
pub(crate) const ROOF_COLOR: &str = "#222222";
/// The largest point's radius, in pixels.
const MAX_RADIUS: f64 = 28.0;
/// Points labelled (the largest).
const LABELLED: usize = 12;

/// log10 bounds, widened to whole decades.
fn decades(lo: f64, hi: f64) -> (f64, f64) {
    let (lo, hi) = (lo.log10().floor(), hi.log10().ceil());
    (lo, if hi > lo { hi } else { lo + 1.0 })
}

/// The chart, or `None` where no value has both FLOPs and bytes to place.
pub(crate) fn svg(e: &Efficiency) -> Option<String> {
    let points: Vec<(&EfficiencyRow, f64, f64)> = e
        .rows
        .iter()
        .filter_map(|r| Some((r, r.intensity.filter(|&i| i > 0.0)?, r.tflops.filter(|&t| t > 0.0)?)))
        .collect();
    if points.is_empty() {
        return None;
    }
    let compute_roof = e.peak_tflops.iter().find(|(c, _)| *c == DtypeClass::DEFAULT).map(|&(_, p)| p);
    let roofs = compute_roof.zip(e.peak_gbps);
    let ridge = roofs.map(|(tflops, gbps)| tflops * 1e3 / gbps);
    let xs = points.iter().map(|p| p.1).chain(ridge);
    let ys = points.iter().map(|p| p.2).chain(compute_roof);
    let (x0, x1) = decades(xs.clone().fold(f64::INFINITY, f64::min), xs.fold(0.0, f64::max));
    let (y0, y1) = decades(ys.clone().fold(f64::INFINITY, f64::min), ys.fold(0.0, f64::max) * 1.5);
    let px = |x: f64| LEFT + (x.log10() - x0) / (x1 - x0) * (RIGHT - LEFT);
    let py = |y: f64| BOTTOM - (y.log10() - y0) / (y1 - y0) * (BOTTOM - TOP);

    let mut s = String::new();
    let title = match e.gpu {
        Some(gpu) => format!("Roofline on {gpu}"),
        None => "Achieved throughput (no peaks known: no roofs)".to_string(),
    };
    let _ = write!(
        s,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="DejaVu Sans, Arial, Helvetica, sans-serif" font-size="12">
<title>{t}</title>
<rect width="100%" height="100%" fill="#ffffff"/>
<text x="16" y="28" font-size="19" font-weight="bold" fill="#222">{t}</text>
<text x="16" y="50" fill="#555">a point per value at its FLOPs per byte and achieved TFLOP/s, its area by its time with counts; log–log</text>
<clipPath id="plot"><rect x="{LEFT}" y="{TOP}" width="{}" height="{}"/></clipPath>
"##,
        RIGHT - LEFT,
        BOTTOM - TOP,
        t = escape(&title),
    );
    for d in x0 as i32..=x1 as i32 {
        let x = px(10f64.powi(d));
        let _ = writeln!(
            s,
            r##"<line x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{BOTTOM}" stroke="#e4e4e4"/><text x="{x:.1}" y="{}" fill="#777" text-anchor="middle">{}</text>"##,
            BOTTOM + 16.0,
            escape(&format!("{}", 10f64.powi(d)))
        );
    }
    for d in y0 as i32..=y1 as i32 {
        let y = py(10f64.powi(d));
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{RIGHT}" y2="{y:.1}" stroke="#e4e4e4"/><text x="{}" y="{:.1}" fill="#777" text-anchor="end">{}</text>"##,
            LEFT - 6.0,
            y + 4.0,
            escape(&format!("{}", 10f64.powi(d)))
        );
    }
    let _ = writeln!(
        s,
        r##"<text x="{:.1}" y="{}" fill="#555" text-anchor="middle">arithmetic intensity (FLOP/byte)</text><text x="22" y="{:.1}" fill="#555" text-anchor="middle" transform="rotate(-90 22 {:.1})">achieved TFLOP/s</text>"##,
        (LEFT + RIGHT) / 2.0,
        BOTTOM + 36.0,
        (TOP + BOTTOM) / 2.0,
        (TOP + BOTTOM) / 2.0
    );
    if let (Some((tflops, gbps)), Some(ridge)) = (roofs, ridge) {
        let left = 10f64.powf(x0);
        let right = 10f64.powf(x1);
        let _ = writeln!(
            s,
            r##"<g clip-path="url(#plot)"><title>roofs: {gbps} GB/s and {tflops} TFLOP/s ({})</title><polyline points="{:.1},{:.1} {:.1},{:.1} {:.1},{:.1}" fill="none" stroke="{ROOF_COLOR}" stroke-width="2.5"/></g><text x="{:.1}" y="{:.1}" fill="#222" text-anchor="end">{tflops} TFLOP/s ({})</text><text x="{:.1}" y="{:.1}" fill="#222">{gbps} GB/s</text>"##,
            DtypeClass::DEFAULT.name(),
            px(left),
            py(gbps * left / 1e3),
            px(ridge),
            py(tflops),
            px(right),
            py(tflops),
            RIGHT - 4.0,
            py(tflops) - 6.0,
            DtypeClass::DEFAULT.name(),
            px(ridge) + 6.0,
            py(tflops) + 16.0,
        );
    }
    let longest = points.iter().map(|p| p.0.counted_us).fold(0.0, f64::max);
    let mut by_time = points.clone();
    by_time.sort_by(|a, b| b.0.counted_us.total_cmp(&a.0.counted_us));
    // The largest first, so smaller points stay visible above them.
    for (k, (r, intensity, tflops)) in by_time.iter().enumerate() {
        let radius = if longest > 0.0 { (r.counted_us / longest).sqrt() * MAX_RADIUS } else { 0.0 }.max(3.0);
        let (x, y) = (px(*intensity), py(*tflops));
        let name = r.value.as_deref().unwrap_or("(unannotated)");
        let share = r.peak_fraction.map_or(String::new(), |f| format!(", {:.1}% of peak", f * 100.0));
        let _ = writeln!(
            s,
            r##"<g><title>{} — {:.1} FLOP/B, {:.2} TFLOP/s, {:.0} GB/s, {}{share}</title><circle cx="{x:.1}" cy="{y:.1}" r="{radius:.1}" fill="{POINT_COLOR}" fill-opacity="0.55" stroke="{POINT_COLOR}"/></g>"##,
            escape(name),
            intensity,
            tflops,
            r.gbps.unwrap_or(0.0),
            escape(&human_time(r.counted_us)),
        );
        if k < LABELLED {
            let short: String =
                name.rsplit('.').take(2).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join(".");
            let _ = writeln!(
                s,
                r##"<text x="{:.1}" y="{:.1}" fill="#333" font-size="11">{}</text>"##,
                x + radius + 3.0,
                y + 4.0,
                escape(&short)
            );
        }
    }
    let _ = writeln!(
        s,
        r##"<rect x="{LEFT}" y="{TOP}" width="{}" height="{}" fill="none" stroke="#555"/>"##,
        RIGHT - LEFT,
        BOTTOM - TOP
    );
    let missing = e.rows.len() - points.len();
    let mut notes: Vec<String> = e.notes.clone();
    if missing > 0 {
        notes.push(if missing == 1 {
            "1 value without both FLOPs and bytes is not drawn".to_string()
        } else {
            format!("{missing} values without both FLOPs and bytes are not drawn")
        });
    }
    let lines: Vec<String> = notes.iter().flat_map(|n| wrap(n, 50)).collect();
    for (k, line) in lines.iter().enumerate() {
        let _ = writeln!(
            s,
            r##"<text x="{}" y="{}" fill="#555" font-size="11">{}</text>"##,
            RIGHT + 20.0,
            TOP + 14.0 + 15.0 * k as f64,
            escape(line)
        );
    }
    s.push_str("</svg>\n");
    Some(s)
}

/// `text` in lines of at most about `width` characters, broken between words.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = vec![String::new()];
    for word in text.split_whitespace() {
        let line = lines.last_mut().expect("a line");
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(word.to_string());
        } else {
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::summary::efficiency::EfficiencyRow;

    fn row(value: &str, intensity: Option<f64>, tflops: Option<f64>) -> EfficiencyRow {
        EfficiencyRow {
            value: Some(value.into()),
            kernels: 1,
            counted_kernels: 1,
            attributed_us: 10.0,
            counted_us: 10.0,
            coverage: 1.0,
            flops_per_replay: None,
            bytes_per_replay: None,
            tflops,
            gbps: Some(1.0),
            intensity,
            bound_us: None,
            peak_fraction: None,
            above_roofline_us: None,
        }
    }

    fn report(rows: Vec<EfficiencyRow>, peaks: bool) -> Efficiency {
        Efficiency {
            devices: vec![],
            gpu: peaks.then_some("H100 SXM"),
            peak_tflops: if peaks { vec![(DtypeClass::Bf16, 989.4)] } else { vec![] },
            peak_gbps: peaks.then_some(3350.0),
            coverage: 1.0,
            notes: vec!["a note".into()],
            rows,
        }
    }

    #[test]
    fn points_roofs_and_what_is_not_drawn() {
        assert_eq!(svg(&report(vec![row("x", None, None)], true)), None);
        let text = svg(&report(vec![row("m.a", Some(50.0), Some(100.0)), row("m.b", None, Some(1.0))], true))
            .unwrap();
        assert_eq!(text.matches("<circle").count(), 1);
        assert!(
            text.contains("<polyline") && text.contains("989.4 TFLOP/s (bf16)") && text.contains("3350 GB/s")
        );
        assert!(text.contains("1 value without both FLOPs and bytes is not") && text.contains("a note"));
        let bare = svg(&report(vec![row("m.a", Some(50.0), Some(100.0))], false)).unwrap();
        assert!(!bare.contains("<polyline") && bare.contains("no peaks known"));
    }
}
