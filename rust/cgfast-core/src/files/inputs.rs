//! The files that command-line inputs name: files as given, directories searched
//! recursively, glob patterns expanded (for patterns too long for a shell).

use std::path::{Path, PathBuf};

use crate::Error;

/// What a directory or a pattern yields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wanted {
    /// Profiler traces (`*.trace.json`, `*.trace.json.gz`, the `*.pt.trace.*` of
    /// PyTorch among them), not the `*.annotated.*` outputs of `cgfast annotate`.
    Traces,
    /// The outputs of `cgfast annotate` (`*.annotated.json`, `*.annotated.json.gz`).
    Annotated,
}

impl Wanted {
    fn describe(self) -> &'static str {
        match self {
            Wanted::Traces => "traces (*.trace.json or *.trace.json.gz)",
            Wanted::Annotated => "annotated traces (*.annotated.json or *.annotated.json.gz)",
        }
    }

    /// Whether a file found in a directory is wanted.
    pub(crate) fn matches(self, name: &str) -> bool {
        let annotated = name.contains(".annotated.");
        match self {
            Wanted::Traces => {
                !annotated && (name.ends_with(".trace.json") || name.ends_with(".trace.json.gz"))
            }
            Wanted::Annotated => annotated && (name.ends_with(".json") || name.ends_with(".json.gz")),
        }
    }

    /// Whether a file a pattern matched is wanted: anything but the files a run
    /// writes beside traces (its outputs, annotation files), when traces are wanted.
    fn matches_pattern(self, name: &str) -> bool {
        match self {
            Wanted::Traces => !name.contains(".annotated.") && !name.starts_with("kernel_annotations_rank"),
            Wanted::Annotated => true,
        }
    }
}

fn is_pattern(text: &str) -> bool {
    text.contains(['*', '?', '['])
}

/// The files `inputs` name, in order, each once. A file that does not exist is kept
/// (reading it reports the error); a directory or a pattern that yields nothing is an
/// error.
pub fn find(inputs: &[PathBuf], wanted: Wanted) -> Result<Vec<PathBuf>, Error> {
    find_where(inputs, wanted, &|_| false)
}

/// [`find`], where a directory for which `holds_other_work(dir)` may yield nothing.
pub(crate) fn find_where(
    inputs: &[PathBuf],
    wanted: Wanted,
    holds_other_work: &dyn Fn(&Path) -> bool,
) -> Result<Vec<PathBuf>, Error> {
    let mut found = Vec::new();
    for input in inputs {
        if input.is_dir() {
            let before = found.len();
            walk(input, wanted, &mut found)?;
            if found.len() == before && !holds_other_work(input) {
                return Err(inputs_error(format!("no {} under {}", wanted.describe(), input.display())));
            }
        } else if input.exists() {
            found.push(input.clone());
        } else if let Some(pattern) = input.to_str().filter(|t| is_pattern(t)) {
            let before = found.len();
            expand(pattern, wanted, &mut found)?;
            if found.len() == before {
                return Err(inputs_error(format!("no {} match {pattern}", wanted.describe())));
            }
        } else {
            found.push(input.clone());
        }
    }
    let mut seen = rustc_hash::FxHashSet::default();
    found.retain(|p| seen.insert(p.clone()));
    Ok(found)
}

fn inputs_error(message: String) -> Error {
    Error::Inputs { message }
}

fn expand(pattern: &str, wanted: Wanted, found: &mut Vec<PathBuf>) -> Result<(), Error> {
    let paths =
        glob::glob(pattern).map_err(|e| inputs_error(format!("{pattern}: not a valid pattern ({e})")))?;
    for path in paths {
        let path = path.map_err(|e| inputs_error(format!("{}: {}", e.path().display(), e.error())))?;
        if path.is_dir() {
            walk(&path, wanted, found)?;
        } else if path.file_name().is_some_and(|n| wanted.matches_pattern(&n.to_string_lossy())) {
            found.push(path);
        }
    }
    Ok(())
}

/// Add the wanted files under `dir`, sorted by path. Links to directories are not
/// followed (they could make a loop); links to files are.
fn walk(dir: &Path, wanted: Wanted, found: &mut Vec<PathBuf>) -> Result<(), Error> {
    let mut entries: Vec<(PathBuf, bool)> = std::fs::read_dir(dir)
        .map_err(|e| inputs_error(format!("{}: cannot list the directory ({e})", dir.display())))?
        .filter_map(|e| e.ok())
        .map(|e| {
            let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
            (e.path(), is_dir)
        })
        .collect();
    entries.sort();
    for (path, is_dir) in entries {
        if is_dir {
            walk(&path, wanted, found)?;
        } else if path.is_file() && path.file_name().is_some_and(|n| wanted.matches(&n.to_string_lossy())) {
            found.push(path);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(root: &Path, rel: &str) -> PathBuf {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, b"{}").unwrap();
        p
    }

    #[test]
    fn directories_yield_traces_or_their_outputs() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        let a = touch(r, "traces/step_2/000000.1.pt.trace.json.gz");
        let b = touch(r, "traces/step_1/000001.1.pt.trace.json");
        let c = touch(r, "other.trace.json");
        let out = touch(r, "traces/step_2/000000.1.pt.trace.annotated.json.gz");
        touch(r, "traces/kernel_annotations_rank0_1.json");
        touch(r, "traces/notes.json");
        assert_eq!(find(&[r.to_path_buf()], Wanted::Traces).unwrap(), vec![c.clone(), b.clone(), a.clone()]);
        assert_eq!(find(&[r.join("traces")], Wanted::Annotated).unwrap(), vec![out.clone()]);
        // Patterns: outputs and annotation files are left out when traces are wanted.
        let all = format!("{}/traces/**/*.json*", r.display());
        let notes = r.join("traces/notes.json");
        assert_eq!(find(&[PathBuf::from(&all)], Wanted::Traces).unwrap(), vec![notes, b.clone(), a.clone()]);
        let gz = format!("{}/traces/*/*.gz", r.display());
        assert_eq!(find(&[PathBuf::from(&gz)], Wanted::Annotated).unwrap(), vec![out.clone(), a.clone()]);
        // Files as given, each once, missing ones kept for the reader to report.
        let missing = r.join("missing.json");
        assert_eq!(
            find(&[out.clone(), missing.clone(), out.clone()], Wanted::Traces).unwrap(),
            vec![out, missing]
        );
    }

    #[test]
    fn empty_directories_and_patterns_are_errors() {
        let root = tempfile::tempdir().unwrap();
        touch(root.path(), "x/notes.txt");
        let err = find(&[root.path().join("x")], Wanted::Traces).unwrap_err().to_string();
        assert!(err.starts_with("no traces (*.trace.json or *.trace.json.gz) under"), "{err}");
        let pattern = PathBuf::from(format!("{}/*.trace.json", root.path().display()));
        assert!(find(&[pattern], Wanted::Traces).unwrap_err().to_string().contains("match"));
        let bad = PathBuf::from(format!("{}/[", root.path().display()));
        assert!(find(&[bad], Wanted::Traces).unwrap_err().to_string().contains("not a valid pattern"));
    }
}
