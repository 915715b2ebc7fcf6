//! Module paths as a hierarchy: values rolled up to their first N dotted segments,
//! numbered siblings (`layers.0`, `layers.1`) merged into `layers.*`, and the tree of
//! the rows that the icicle chart draws.

use std::borrow::Cow;

use super::read::{Kernels, NONE};
use super::Row;
use crate::index::keys::Strings;

/// How values are rolled up, and whether the chart draws their tree.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Hierarchy {
    /// Keep the first `depth` dotted segments of each value (at least 1).
    pub depth: Option<usize>,
    /// Write every all-digit segment as `*`, merging numbered siblings.
    pub group_layers: bool,
    /// Draw the values' tree as an icicle in the chart.
    pub tree: bool,
}

/// The segment that stands for every numbered sibling.
pub(crate) const ANY_LAYER: &str = "*";

/// The key whose values are module paths: its chart draws their tree unless told not to.
pub const MODULE_KEY: &str = "module";

impl Hierarchy {
    /// Values of `by` rolled up to `depth` segments (and numbered siblings merged with
    /// `group_layers`); the tree drawn when `tree` says so, or, when it says nothing,
    /// when values are rolled up or are module paths (`by` is `module`).
    pub fn new(by: &str, depth: Option<usize>, group_layers: bool, tree: Option<bool>) -> Hierarchy {
        let rolled = Hierarchy { depth, group_layers, tree: false };
        Hierarchy { tree: tree.unwrap_or(by == MODULE_KEY || rolled.rolls_up()), ..rolled }
    }

    /// Whether values are changed at all.
    pub fn rolls_up(&self) -> bool {
        self.depth.is_some() || self.group_layers
    }

    /// `value` as it is grouped: `model.layers.3.mlp` is `model.layers` at depth 2 and
    /// `model.layers.*.mlp` with `group_layers`.
    pub fn roll_up<'a>(&self, value: &'a str) -> Cow<'a, str> {
        if !self.rolls_up() {
            return Cow::Borrowed(value);
        }
        let depth = self.depth.unwrap_or(usize::MAX);
        let segments: Vec<&str> = value
            .split('.')
            .take(depth)
            .map(|s| if self.group_layers && is_number(s) { ANY_LAYER } else { s })
            .collect();
        let joined = segments.join(".");
        if joined == value {
            Cow::Borrowed(value)
        } else {
            Cow::Owned(joined)
        }
    }

    /// Roll up the values of a trace's kernels in place, so that every later step
    /// (busy time, attribution, replays) sees the merged values.
    pub(crate) fn apply(&self, k: &mut Kernels) {
        if !self.rolls_up() {
            return;
        }
        let mut values = Strings::default();
        let ids: Vec<u32> =
            (0..k.values.len() as u32).map(|id| values.intern(&self.roll_up(k.values.get(id)))).collect();
        for kernel in &mut k.kernels {
            if kernel.value != NONE {
                kernel.value = ids[kernel.value as usize];
            }
        }
        k.values = values;
    }
}

fn is_number(segment: &str) -> bool {
    !segment.is_empty() && segment.bytes().all(|b| b.is_ascii_digit())
}

/// A node of the tree of values: a dotted path, its own rows' time and its subtree's.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct PathNode {
    /// Its last segment (`(unannotated)` for kernels without the key; empty at the root).
    pub(crate) name: String,
    /// The whole path, as the rows spell it.
    pub(crate) path: String,
    /// Attributed µs of the value that is exactly this path.
    pub(crate) own_us: f64,
    /// Attributed µs of this path and every path under it.
    pub(crate) total_us: f64,
    pub(crate) share: f64,
    /// Kernels of this path and every path under it.
    pub(crate) kernels: u64,
    /// Numbered children in their order, after the others, largest first.
    pub(crate) children: Vec<PathNode>,
    /// Kernels without the key (a child of the root only).
    pub(crate) unannotated: bool,
}

impl PathNode {
    fn new(name: &str, path: String) -> PathNode {
        PathNode {
            name: name.to_string(),
            path,
            own_us: 0.0,
            total_us: 0.0,
            share: 0.0,
            kernels: 0,
            children: Vec::new(),
            unannotated: false,
        }
    }

    /// Levels below and including this one.
    pub(crate) fn height(&self) -> usize {
        1 + self.children.iter().map(PathNode::height).max().unwrap_or(0)
    }

    fn child(&mut self, name: &str) -> &mut PathNode {
        let at = match self.children.iter().position(|c| c.name == name && !c.unannotated) {
            Some(at) => at,
            None => {
                let path =
                    if self.path.is_empty() { name.to_string() } else { format!("{}.{name}", self.path) };
                self.children.push(PathNode::new(name, path));
                self.children.len() - 1
            }
        };
        &mut self.children[at]
    }

    fn finish(&mut self, busy_us: f64) {
        for c in &mut self.children {
            c.finish(busy_us);
        }
        self.total_us = self.own_us + self.children.iter().map(|c| c.total_us).sum::<f64>();
        self.kernels += self.children.iter().map(|c| c.kernels).sum::<u64>();
        self.share = if busy_us > 0.0 { self.total_us / busy_us } else { 0.0 };
        self.children.sort_by(|a, b| {
            order_key(a)
                .partial_cmp(&order_key(b))
                .unwrap_or(std::cmp::Ordering::Equal)
                .then_with(|| a.name.cmp(&b.name))
        });
    }
}

/// Named children largest first, then numbered ones by number, then the unannotated.
fn order_key(n: &PathNode) -> (u8, f64) {
    if n.unannotated {
        (2, 0.0)
    } else if is_number(&n.name) {
        (1, n.name.parse::<f64>().unwrap_or(f64::MAX))
    } else {
        (0, -n.total_us)
    }
}

/// The tree of `rows` (values split at dots), under a root holding all busy time.
pub(crate) fn tree(rows: &[Row], busy_us: f64) -> PathNode {
    let mut root = PathNode::new("", String::new());
    for r in rows {
        let node = match &r.value {
            Some(value) => value.split('.').fold(&mut root, |node, segment| node.child(segment)),
            None => {
                let mut n = PathNode::new("(unannotated)", "(unannotated)".into());
                n.unannotated = true;
                root.children.push(n);
                root.children.last_mut().expect("just pushed")
            }
        };
        node.own_us += r.attributed_us;
        node.kernels += r.kernels;
    }
    root.finish(busy_us);
    root
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(depth: Option<usize>, group_layers: bool) -> Hierarchy {
        Hierarchy { depth, group_layers, tree: false }
    }

    #[test]
    fn values_roll_up_to_a_depth_and_merge_numbered_siblings() {
        let path = "model.layers.12.self_attn.q_proj";
        assert_eq!(h(None, false).roll_up(path), path);
        assert_eq!(h(Some(1), false).roll_up(path), "model");
        assert_eq!(h(Some(3), false).roll_up(path), "model.layers.12");
        assert_eq!(h(Some(9), false).roll_up(path), path);
        assert_eq!(h(None, true).roll_up(path), "model.layers.*.self_attn.q_proj");
        assert_eq!(h(Some(4), true).roll_up(path), "model.layers.*.self_attn");
        // Only whole numbers are layers; names with digits stay.
        assert_eq!(h(None, true).roll_up("blocks.0.fc1.h2o"), "blocks.*.fc1.h2o");
        assert_eq!(h(None, true).roll_up("7"), "*");
        assert_eq!(h(Some(2), true).roll_up(""), "");
    }

    fn row(value: Option<&str>, us: f64, kernels: u64) -> Row {
        Row {
            value: value.map(str::to_string),
            kernels,
            total_us: us,
            mean_us: 0.0,
            busy_us: us,
            attributed_us: us,
            share: 0.0,
            top_kernels: Vec::new(),
            per_replay: None,
        }
    }

    #[test]
    fn the_tree_is_drawn_for_module_paths_unless_told_not_to() {
        let tree = |by, depth, group_layers, tree| Hierarchy::new(by, depth, group_layers, tree).tree;
        assert!(tree("module", None, false, None));
        assert!(!tree("module", None, false, Some(false)));
        assert!(!tree("module", Some(2), true, Some(false)));
        assert!(!tree("name", None, false, None));
        assert!(tree("name", None, false, Some(true)));
        assert!(tree("name", Some(2), false, None));
        assert!(tree("stream", None, true, None));
        assert_eq!(
            Hierarchy::new("module", Some(3), true, None),
            Hierarchy { depth: Some(3), group_layers: true, tree: true }
        );
    }

    #[test]
    fn the_tree_sums_subtrees_and_orders_children() {
        let rows = [
            row(Some("m.layers.10.mlp"), 5.0, 1),
            row(Some("m.layers.2.mlp"), 4.0, 2),
            row(Some("m.layers.2"), 1.0, 1),
            row(Some("m.embed"), 3.0, 1),
            row(Some("m.norm"), 6.0, 1),
            row(None, 1.0, 4),
        ];
        let root = tree(&rows, 20.0);
        assert_eq!((root.total_us, root.kernels, root.share, root.height()), (20.0, 10, 1.0, 5));
        let names: Vec<&str> = root.children.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["m", "(unannotated)"]);
        let m = &root.children[0];
        assert_eq!(
            m.children.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
            ["layers", "norm", "embed"]
        );
        let layers = &m.children[0];
        assert_eq!((layers.total_us, layers.own_us, layers.path.as_str()), (10.0, 0.0, "m.layers"));
        // Numbered children in their order, not by size.
        assert_eq!(layers.children.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["2", "10"]);
        let two = &layers.children[0];
        assert_eq!((two.own_us, two.total_us, two.kernels, two.share), (1.0, 5.0, 3, 0.25));
        assert_eq!(two.children[0].path, "m.layers.2.mlp");
    }
}
