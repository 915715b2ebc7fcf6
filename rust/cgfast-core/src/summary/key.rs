//! Which key groups the kernels: the one asked for, or by default `module` where the
//! traces carry it, else `name`, else the kernel's own name. `summary` and `diff` read
//! each trace once for the first two keys (the kernel's name is always read).

use std::path::Path;

use super::hierarchy::{Hierarchy, MODULE_KEY};
use super::read::{self, Kernels, NONE};
use super::{Replay, ReplayValue, Summary, ValueTotals};
use crate::{CancelToken, Error};

/// Groups by the kernel's own name (the event's `name`, not a key of `args`): what
/// Holistic Trace Analysis and the profilers' own tables group by.
pub const KERNEL_KEY: &str = "kernel";

/// The keys grouped by when none is asked for, in order: the first that a graphed kernel
/// of the traces carries (the kernel's name always is).
pub(crate) const DEFAULT_KEYS: [&str; 3] = [MODULE_KEY, "name", KERNEL_KEY];

/// `--by` left out: the key is the first of [`DEFAULT_KEYS`] the traces carry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DefaultKey {
    /// The icicle as asked for (`--hierarchy`, `--no-hierarchy`); `None`: drawn for
    /// module paths and rolled-up values, as [`Hierarchy::new`] has it.
    pub tree: Option<bool>,
}

/// How `by` reads in a sentence: `args.module`, or `kernel name`.
pub fn label(by: &str) -> String {
    if by == KERNEL_KEY {
        "kernel name".to_string()
    } else {
        format!("args.{by}")
    }
}

/// Why the default key is `by` rather than an earlier one of [`DEFAULT_KEYS`], in a
/// sentence (`None` for the first).
pub fn fallback_note(by: &str) -> Option<String> {
    let at = DEFAULT_KEYS.iter().position(|&k| k == by)?;
    let missing: Vec<String> = DEFAULT_KEYS[..at].iter().map(|k| label(k)).collect();
    (at > 0).then(|| format!("no graphed kernel carries {}", missing.join(" or ")))
}

/// The position of `by` in [`DEFAULT_KEYS`] (past the end for any other key).
pub(crate) fn rank_of_key(by: &str) -> usize {
    DEFAULT_KEYS.iter().position(|&k| k == by).unwrap_or(DEFAULT_KEYS.len())
}

/// Whether a graphed kernel carries the key read.
pub(crate) fn carries(k: &Kernels) -> bool {
    k.kernels.iter().any(|k| k.value != NONE)
}

/// Key every kernel by its own name.
pub(crate) fn by_kernel_name(k: &mut Kernels) {
    for kernel in &mut k.kernels {
        kernel.value = kernel.name;
    }
    // Interned in the same order, the names keep their ids as values.
    let mut values = crate::index::keys::Strings::default();
    for id in 0..k.names.len() as u32 {
        values.intern(k.names.get(id));
    }
    k.values = values;
}

fn by_fallback(k: &mut Kernels) {
    for kernel in &mut k.kernels {
        kernel.value = kernel.fallback;
    }
    k.values = std::mem::take(&mut k.fallback_values);
}

/// Read `path` with its kernels keyed by `by`, or (`None`) by the first of
/// [`DEFAULT_KEYS`] it carries; returns the key used. Values are not rolled up.
pub(crate) fn read_keyed(
    path: &Path,
    by: Option<&str>,
    cancel: &CancelToken,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<(Kernels, &'static str), Error> {
    let Some(by) = by else {
        let mut k = read::read_keys(path, DEFAULT_KEYS[0], Some(DEFAULT_KEYS[1]), cancel, progress)?;
        if carries(&k) {
            return Ok((k, DEFAULT_KEYS[0]));
        }
        if k.kernels.iter().any(|k| k.fallback != NONE) {
            by_fallback(&mut k);
            return Ok((k, DEFAULT_KEYS[1]));
        }
        by_kernel_name(&mut k);
        return Ok((k, DEFAULT_KEYS[2]));
    };
    let mut k = read::read(path, by, cancel, progress)?;
    if by == KERNEL_KEY {
        by_kernel_name(&mut k);
    }
    Ok((k, ""))
}

/// The hierarchy of values keyed by `by`: `hierarchy`'s roll-up, the tree as asked.
pub(crate) fn hierarchy_for(by: &str, hierarchy: Hierarchy, default: DefaultKey) -> Hierarchy {
    Hierarchy::new(by, hierarchy.depth, hierarchy.group_layers, default.tree)
}

impl Summary {
    /// The same summary with every kernel unannotated: what grouping by a key that its
    /// traces do not carry gives.
    pub(crate) fn without_values(self) -> Summary {
        let mut all = ValueTotals::default();
        for (_, t) in self.values {
            all.kernels += t.kernels;
            all.total_ns += t.total_ns;
            all.attributed_ns += t.attributed_ns;
            all.counted.merge(t.counted);
            for (name, n) in t.by_name {
                let m = all.by_name.entry(name).or_default();
                m.kernels += n.kernels;
                m.total_ns += n.total_ns;
            }
        }
        // The union of all of a trace's kernels is its busy time.
        all.busy_ns = self.traces.iter().map(|t| t.busy_ns).sum();
        let replays: Vec<Replay> = self
            .replays
            .into_iter()
            .map(|r| {
                let value = ReplayValue {
                    value: None,
                    kernels: r.kernels,
                    total_ns: r.total_ns,
                    busy_ns: r.busy_ns,
                    attributed_ns: r.values.iter().map(|v| v.attributed_ns).sum(),
                };
                Replay { values: vec![value], ..r }
            })
            .collect();
        if self.steps {
            all.per_replay_ns = replays.iter().map(|r| r.values[0].attributed_ns).collect();
        }
        let mut values = rustc_hash::FxHashMap::default();
        if all.kernels > 0 {
            values.insert(None, all);
        }
        Summary { values, replays, ..self }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_text(text: &str, by: Option<&str>) -> (Kernels, &'static str) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.json");
        std::fs::write(&path, text).unwrap();
        read_keyed(&path, by, &CancelToken::new(), &mut |_, _| {}).unwrap()
    }

    fn values(k: &Kernels) -> Vec<String> {
        k.kernels
            .iter()
            .map(|x| if x.value == NONE { "-".into() } else { k.values.get(x.value).into() })
            .collect()
    }

    const TWO: &str = r#"{"traceEvents": [
        {"cat": "kernel", "name": "gemm", "ts": 1, "dur": 1, "args": {"graph node id": 9, "correlation": 3, "name": "label"MODULE}},
        {"cat": "kernel", "name": "add", "ts": 2, "dur": 1, "args": {"graph node id": 8, "correlation": 3}}
    ]}"#;

    #[test]
    fn the_default_key_is_the_first_the_trace_carries() {
        let (k, key) = read_text(&TWO.replace("MODULE", r#", "module": "m.a""#), None);
        assert_eq!((key, values(&k)), ("module", vec!["m.a".to_string(), "-".into()]));
        let (k, key) = read_text(&TWO.replace("MODULE", ""), None);
        assert_eq!((key, values(&k)), ("name", vec!["label".to_string(), "-".into()]));
        let (k, key) = read_text(&TWO.replace("MODULE", "").replace(r#", "name": "label""#, ""), None);
        assert_eq!((key, values(&k)), ("kernel", vec!["gemm".to_string(), "add".into()]));
        assert_eq!(k.names.get(k.kernels[1].name), "add");
        // A key asked for is read as it is; `kernel` is the kernel's own name.
        let (k, _) = read_text(&TWO.replace("MODULE", ""), Some("module"));
        assert_eq!(values(&k), ["-", "-"]);
        let (k, _) = read_text(&TWO.replace("MODULE", ""), Some("kernel"));
        assert_eq!(values(&k), ["gemm", "add"]);
    }

    #[test]
    fn labels_and_notes() {
        assert_eq!(label("module"), "args.module");
        assert_eq!(label("kernel"), "kernel name");
        assert_eq!(fallback_note("module"), None);
        assert_eq!(fallback_note("name").as_deref(), Some("no graphed kernel carries args.module"));
        assert_eq!(
            fallback_note("kernel").as_deref(),
            Some("no graphed kernel carries args.module or args.name")
        );
        assert_eq!(fallback_note("stream"), None);
        assert_eq!((rank_of_key("module"), rank_of_key("kernel"), rank_of_key("stream")), (0, 2, 3));
    }
}
