//! File names the reference CLI uses: the default output name and where the
//! annotations of a trace are found.

use std::path::{Path, PathBuf};

use crate::Error;

/// `<trace>.annotated.json[.gz]`, exactly as the reference names it.
pub fn default_output(trace: &Path) -> PathBuf {
    let name = trace.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let renamed = if name.ends_with(".json.gz") {
        name.replace(".json.gz", ".annotated.json.gz")
    } else if let Some(stem) = name.strip_suffix(".json") {
        format!("{stem}.annotated.json")
    } else {
        format!("{name}.annotated")
    };
    trace.with_file_name(renamed)
}

/// The annotation file of `trace`'s rank (`kernel_annotations_rank<R>_*.json` or `.pkl`
/// beside it or one level up), or why none was found, ending in how to name them
/// (`how_to_name`: the flag or argument of the caller's interface).
pub fn find_annotations(trace: &Path, how_to_name: &str) -> Result<PathBuf, Error> {
    discover_annotations(trace).ok_or_else(|| {
        Error::annotations(
            None,
            format!(
            "could not find the annotations of {} (kernel_annotations_rank<R>_*.json or .pkl beside it or \
             one level up); {how_to_name}",
            trace.display()
        ),
        )
    })
}

/// The rank a trace's file name starts with (`000001.host_7.pt.trace.json.gz`: 1), as
/// `trace_handler` and `tensorboard_trace_handler` name them.
pub(crate) fn rank_of_name(trace: &Path) -> Option<u64> {
    let name = trace.file_name()?.to_string_lossy().into_owned();
    let digits: String = name.chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().ok()
}

/// For `traces/step_N/RANK.<id>.pt.trace.json.gz`, the first of
/// `traces/kernel_annotations_rank{RANK}_*.{json,json.gz,pkl}` (then the same names
/// beside the trace itself), JSON before pickles.
pub(crate) fn discover_annotations(trace: &Path) -> Option<PathBuf> {
    let rank = rank_of_name(trace)?;
    let dir = trace.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let dirs = [dir.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new(".")), dir];
    dirs.into_iter().find_map(|dir| rank_annotations_in(dir, rank))
}

/// The first of `dir/kernel_annotations_rank{rank}_*.{json,json.gz,pkl}`, JSON before
/// pickles.
pub(crate) fn rank_annotations_in(dir: &Path, rank: u64) -> Option<PathBuf> {
    let prefix = format!("kernel_annotations_rank{rank}_");
    let entries = std::fs::read_dir(dir).ok()?;
    let mut found: Vec<(u8, String)> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with(&prefix))
        .filter_map(|n| {
            let rank = if n.ends_with(".json") || n.ends_with(".json.gz") {
                0
            } else if n.ends_with(".pkl") {
                1
            } else {
                return None;
            };
            Some((rank, n))
        })
        .collect();
    found.sort();
    found.into_iter().next().map(|(_, n)| dir.join(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_names_match_the_reference() {
        assert_eq!(
            default_output(Path::new("a/t.pt.trace.json.gz")),
            PathBuf::from("a/t.pt.trace.annotated.json.gz")
        );
        assert_eq!(default_output(Path::new("t.json")), PathBuf::from("t.annotated.json"));
        assert_eq!(default_output(Path::new("t.gz")), PathBuf::from("t.gz.annotated"));
        assert_eq!(default_output(Path::new("t")), PathBuf::from("t.annotated"));
    }

    #[test]
    fn discovers_annotations_one_level_up() {
        let root = tempfile::tempdir().unwrap();
        let step = root.path().join("step_000000000014");
        std::fs::create_dir(&step).unwrap();
        let trace = step.join("000001.123.pt.trace.json.gz");
        assert_eq!(discover_annotations(&trace), None);
        std::fs::write(root.path().join("kernel_annotations_rank1_77.pkl"), b"").unwrap();
        assert_eq!(discover_annotations(&trace), Some(root.path().join("kernel_annotations_rank1_77.pkl")));
        std::fs::write(root.path().join("kernel_annotations_rank1_77.json"), b"").unwrap();
        assert_eq!(discover_annotations(&trace), Some(root.path().join("kernel_annotations_rank1_77.json")));
        assert_eq!(discover_annotations(&step.join("trace.json")), None);
    }
}
