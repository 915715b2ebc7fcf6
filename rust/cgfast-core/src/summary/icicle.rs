//! The values' hierarchy as an icicle: a row per level of the dotted paths, each
//! path a cell as wide as its share of busy time, under the path that holds it. No
//! scripts or external resources; hovering a cell shows its path and times.

use std::fmt::Write as _;

use rustc_hash::FxHashMap as HashMap;

use super::chart::{escape, human_time, UNANNOTATED_COLOR};
use super::hierarchy::{tree, PathNode, ANY_LAYER};
use super::{Row, Summary};

const WIDTH: u32 = 1100;
const LEFT: f64 = 16.0;
const INNER_W: f64 = WIDTH as f64 - 2.0 * LEFT;
const TOP: u32 = 84;
pub(crate) const LEVEL_H: u32 = 30;
/// Cells narrower than this get no label.
const MIN_LABEL_W: f64 = 24.0;
/// A generous width per character of the 12 px labels, so that no label overflows.
const CHAR_W: f64 = 7.3;
/// Paths above the level where the tree first branches (`model` over everything).
const TRUNK_COLOR: (u8, u8, u8) = (0x4a, 0x55, 0x68);
/// Tableau 10 without its grey, which marks unannotated kernels.
const PALETTE: [(u8, u8, u8); 9] = [
    (0x4e, 0x79, 0xa7),
    (0xf2, 0x8e, 0x2b),
    (0xe1, 0x57, 0x59),
    (0x76, 0xb7, 0xb2),
    (0x59, 0xa1, 0x4f),
    (0xed, 0xc9, 0x48),
    (0xb0, 0x7a, 0xa1),
    (0xff, 0x9d, 0xa7),
    (0x9c, 0x75, 0x5f),
];

pub(super) fn hex(c: (u8, u8, u8)) -> String {
    format!("#{:02x}{:02x}{:02x}", c.0, c.1, c.2)
}

fn parse_hex(text: &str) -> (u8, u8, u8) {
    let v = u32::from_str_radix(text.trim_start_matches('#'), 16).unwrap_or(0);
    ((v >> 16) as u8, (v >> 8) as u8, v as u8)
}

/// `c` mixed with white: `amount` 0 keeps it, 1 is white.
pub(super) fn tint(c: (u8, u8, u8), amount: f64) -> (u8, u8, u8) {
    let mix = |x: u8| (x as f64 + (255.0 - x as f64) * amount).round() as u8;
    (mix(c.0), mix(c.1), mix(c.2))
}

pub(super) fn text_color(c: (u8, u8, u8)) -> &'static str {
    let luminance = (0.299 * c.0 as f64 + 0.587 * c.1 as f64 + 0.114 * c.2 as f64) / 255.0;
    if luminance < 0.6 {
        "#ffffff"
    } else {
        "#222222"
    }
}

/// The first label of `choices` that fits `width` px, or (with `cut`) the first one
/// cut short.
pub(super) fn fit(choices: &[String], width: f64, cut: bool) -> Option<String> {
    if width < MIN_LABEL_W {
        return None;
    }
    let room = ((width - 8.0) / CHAR_W).floor() as usize;
    if let Some(c) = choices.iter().find(|c| c.chars().count() <= room) {
        return Some(c.clone());
    }
    let first = choices.first()?;
    (cut && room >= 3).then(|| format!("{}…", first.chars().take(room - 1).collect::<String>()))
}

struct IcicleLayout<'a> {
    out: &'a mut String,
    scale: f64,
    /// A colour per segment name: every `attn` alike, wherever it is.
    colors: HashMap<&'a str, (u8, u8, u8)>,
}

/// Colours by segment name, the names with most time first, so that the largest
/// names differ and a module repeated in every layer looks the same in each.
fn colors_by_name(root: &PathNode) -> HashMap<&str, (u8, u8, u8)> {
    fn add<'a>(n: &'a PathNode, time: &mut HashMap<&'a str, f64>) {
        for c in n.children.iter().filter(|c| !c.unannotated) {
            *time.entry(c.name.as_str()).or_default() += c.total_us;
            add(c, time);
        }
    }
    let mut time = HashMap::default();
    add(root, &mut time);
    let mut names: Vec<(&str, f64)> = time.into_iter().collect();
    names.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    // Past the palette, its colours again in lighter tints.
    let color = |k: usize| tint(PALETTE[k % PALETTE.len()], (0.3 * (k / PALETTE.len()) as f64).min(0.6));
    names.into_iter().enumerate().map(|(k, (name, _))| (name, color(k))).collect()
}

impl IcicleLayout<'_> {
    /// A cell over `[x, x + w)` px.
    fn cell(
        &mut self,
        (x, w): (f64, f64),
        level: usize,
        fill: (u8, u8, u8),
        labels: &[String],
        tooltip: &str,
        italic: bool,
    ) {
        let y = TOP + LEVEL_H * level as u32;
        // Whole pixels, a white one between neighbours: crisp edges.
        let (left, right) = (x.round(), (x + w).round());
        if right - left < 1.0 {
            return;
        }
        let drawn = (right - left - 1.0).max(1.0);
        let _ = write!(
            self.out,
            r##"<g><title>{}</title><rect x="{left:.0}" y="{y}" width="{drawn:.0}" height="{}" fill="{}"/>"##,
            escape(tooltip),
            LEVEL_H - 2,
            hex(fill)
        );
        if let Some(label) = fit(labels, w, !italic) {
            let style = if italic { r#" font-style="italic""# } else { "" };
            let _ = write!(
                self.out,
                r##"<text x="{:.2}" y="{}" fill="{}"{style}>{}</text>"##,
                left + 4.0,
                y + LEVEL_H / 2 + 3,
                text_color(fill),
                escape(&label)
            );
        }
        self.out.push_str("</g>\n");
    }

    fn node(&mut self, n: &PathNode, x: f64, level: usize) {
        let w = n.total_us * self.scale;
        if w < 0.5 {
            return;
        }
        let fill = if n.unannotated {
            parse_hex(UNANNOTATED_COLOR)
        } else if level == 0 {
            TRUNK_COLOR
        } else {
            self.colors.get(n.name.as_str()).copied().unwrap_or(TRUNK_COLOR)
        };
        let share = format!("{:.1}%", n.share * 100.0);
        let time = human_time(n.total_us);
        let shown = if n.name == ANY_LAYER { "* (layers)".to_string() } else { n.name.clone() };
        let (labels, tooltip) = if level == 0 {
            (
                vec![format!("all graphed kernels · {time} busy"), "all".into()],
                format!("all graphed kernels — {time} of busy time, {} kernels", n.kernels),
            )
        } else {
            let mut tooltip = format!("{} — {time} ({share} of busy time), {} kernels", n.path, n.kernels);
            if !n.children.is_empty() && n.own_us > 0.0 {
                let _ = write!(tooltip, "; its own kernels {}", human_time(n.own_us));
            }
            if n.path.split('.').any(|s| s == ANY_LAYER) {
                tooltip.push_str("; * stands for every numbered layer");
            }
            (vec![format!("{shown} · {time} · {share}"), format!("{shown} {share}"), shown.clone()], tooltip)
        };
        self.cell((x, w), level, fill, &labels, &tooltip, false);
        let mut at = x;
        for c in &n.children {
            self.node(c, at, level + 1);
            at += c.total_us * self.scale;
        }
        if !n.children.is_empty() && n.own_us * self.scale >= 0.5 {
            let own_fill = tint(fill, 0.75);
            let tooltip = format!(
                "{} itself (kernels of this path, not of a path under it) — {}",
                n.path,
                human_time(n.own_us)
            );
            self.cell((at, n.own_us * self.scale), level + 1, own_fill, &["(own)".into()], &tooltip, true);
        }
    }
}

/// The icicle of `rows` as an SVG document, and its height.
pub(crate) fn svg(summary: &Summary, rows: &[Row]) -> (String, u32) {
    let busy_us = summary.busy_ns() as f64 / 1000.0;
    let root = tree(rows, busy_us);
    let levels = root.height() as u32;
    let height = TOP + LEVEL_H * levels + 14;
    let mut notes = Vec::new();
    if let Some(depth) = summary.hierarchy.depth {
        notes.push(format!("rolled up to {depth} level{}", if depth == 1 { "" } else { "s" }));
    }
    if summary.hierarchy.group_layers {
        notes.push("numbered layers merged as *".to_string());
    }
    notes.push("each path as wide as its share of busy time; hover a cell for its times".to_string());
    let mut s = String::new();
    let _ = write!(
        s,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="DejaVu Sans, Arial, Helvetica, sans-serif" font-size="12">
<rect width="100%" height="100%" fill="#ffffff"/>
<text x="16" y="30" font-size="19" font-weight="bold" fill="#222">{}</text>
<text x="16" y="54" font-size="13" fill="#555">{}</text>
"##,
        escape(&format!("The {} hierarchy", super::key::label(&summary.by))),
        escape(&notes.join("; "))
    );
    if root.total_us > 0.0 {
        let mut layout =
            IcicleLayout { out: &mut s, scale: INNER_W / root.total_us, colors: colors_by_name(&root) };
        layout.node(&root, LEFT, 0);
    } else {
        let _ = writeln!(s, r##"<text x="16" y="{}" fill="#555">no graphed kernels</text>"##, TOP + 18);
    }
    s.push_str("</svg>\n");
    (s, height)
}

/// The icicle above the bar chart, as one SVG document.
pub(crate) fn with_bars(summary: &Summary, rows: &[Row], bars: &str) -> String {
    let (icicle, icicle_h) = svg(summary, rows);
    let bars_h: u32 = bars
        .split("height=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .and_then(|h| h.parse().ok())
        .unwrap_or(0);
    let height = icicle_h + bars_h;
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height}\" viewBox=\"0 0 {WIDTH} {height}\">\n{icicle}{}</svg>\n",
        bars.replacen("<svg ", &format!("<svg y=\"{icicle_h}\" "), 1)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_fit_their_cells() {
        let choices =
            ["layers · 1.00 ms · 50.0%".to_string(), "layers 50.0%".to_string(), "layers".to_string()];
        assert_eq!(fit(&choices, 400.0, true).as_deref(), Some("layers · 1.00 ms · 50.0%"));
        assert_eq!(fit(&choices, 110.0, true).as_deref(), Some("layers 50.0%"));
        assert_eq!(fit(&choices, 60.0, true).as_deref(), Some("layers"));
        assert_eq!(fit(&choices, 40.0, true).as_deref(), Some("lay…"));
        assert_eq!(fit(&choices, 40.0, false), None);
        assert_eq!(fit(&choices, 20.0, true), None);
    }

    #[test]
    fn a_name_has_one_colour_everywhere() {
        let row = |v: &str, us: f64| Row {
            value: Some(v.into()),
            kernels: 1,
            total_us: us,
            mean_us: us,
            busy_us: us,
            attributed_us: us,
            share: 0.0,
            top_kernels: Vec::new(),
            per_replay: None,
        };
        let root = tree(
            &[
                row("layers.0.attn", 3.0),
                row("layers.1.attn", 3.0),
                row("layers.1.mlp", 1.0),
                row("embed", 2.0),
            ],
            9.0,
        );
        let colors = colors_by_name(&root);
        // layers 7, attn 6, 1 4, 0 3, embed 2, mlp 1.
        assert_eq!(colors["layers"], PALETTE[0]);
        assert_eq!(colors["attn"], PALETTE[1]);
        assert_eq!(
            (colors["1"], colors["0"], colors["embed"], colors["mlp"]),
            (PALETTE[2], PALETTE[3], PALETTE[4], PALETTE[5])
        );
        assert_eq!(text_color(TRUNK_COLOR), "#ffffff");
        assert_eq!(text_color(tint(PALETTE[0], 0.64)), "#222222");
    }
}
