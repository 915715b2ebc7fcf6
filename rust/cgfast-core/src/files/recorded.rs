//! Traces paired with the annotation files that list them. `cgfast run` saves, per
//! process, `kernel_annotations_rank{R}_{pid}.json` with the traces that process exported
//! (`"traces"`), wherever its own profiler put them and however it named them; a
//! [`Pairing`] reads the annotation files of some directories and gives each trace the
//! file that lists it, and a trace that none lists the file of its rank.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::annotations::file::read_traces;
use crate::files::inputs::{find_where, Wanted};
use crate::files::paths::{find_annotations, rank_annotations_in, rank_of_name};
use crate::Error;

/// Which annotation file annotates each trace: the one that lists the trace in its
/// `"traces"`, else the file of the trace's rank.
#[derive(Clone, Debug)]
pub struct Pairing {
    /// Each listed trace that exists, by its canonical path.
    listed: BTreeMap<PathBuf, Listed>,
    /// The listed traces that do not exist (any more), as listed.
    missing: BTreeSet<PathBuf>,
    /// The directories whose annotation files were read, canonical.
    read: Vec<PathBuf>,
    /// Where the annotations of a trace that no file lists are.
    unlisted: Unlisted,
}

/// A trace an annotation file lists.
#[derive(Clone, Debug)]
struct Listed {
    /// As the file lists it (a relative path joined to the file's directory).
    trace: PathBuf,
    /// The annotation file.
    annotations: PathBuf,
    /// The directory the file was found in, canonical.
    directory: PathBuf,
}

/// Where the annotations of a trace that no file lists are looked for.
#[derive(Clone, Debug)]
enum Unlisted {
    /// As [`find_annotations`] looks: by its rank, beside the trace or one level up.
    Beside,
    /// By its rank, in this directory.
    In(PathBuf),
}

/// The traces `inputs` name, as [`find_traces`](crate::find_traces) finds them, then
/// every trace that the annotation files directly in the directories among them list,
/// wherever it is, each trace once; and the pairing of each with its annotation file,
/// which for a trace that no file lists is found as [`find_annotations`] finds it. A
/// directory that holds no trace but annotation files listing some is no error.
pub fn find_paired_traces(inputs: &[PathBuf]) -> Result<(Vec<PathBuf>, Pairing), Error> {
    let mut pairing = Pairing::new(Unlisted::Beside);
    for dir in inputs.iter().filter(|input| input.is_dir()) {
        pairing.read_directory(dir)?;
    }
    let mut traces = find_where(inputs, Wanted::Traces, &|dir| pairing.lists_traces_from(dir))?;
    if !pairing.listed.is_empty() {
        let found: BTreeSet<PathBuf> = traces.iter().filter_map(|t| t.canonicalize().ok()).collect();
        let unfound = pairing.listed.iter().filter(|(canonical, _)| !found.contains(*canonical));
        traces.extend(unfound.map(|(_, listed)| listed.trace.clone()));
    }
    Ok((traces, pairing))
}

impl Pairing {
    /// The pairing by the annotation files directly in `dir`, where a trace that none
    /// lists gets the file of its rank in `dir`.
    pub fn in_directory(dir: &Path) -> Result<Pairing, Error> {
        let mut pairing = Pairing::new(Unlisted::In(dir.to_path_buf()));
        pairing.read_directory(dir)?;
        Ok(pairing)
    }

    fn new(unlisted: Unlisted) -> Pairing {
        Pairing { listed: BTreeMap::new(), missing: BTreeSet::new(), read: Vec::new(), unlisted }
    }

    /// The annotation file of `trace`: the one that lists it, else its rank's; or why
    /// there is none, ending in how to name it (`how_to_name`: the flag or argument of
    /// the caller's interface).
    pub fn annotations_of(&self, trace: &Path, how_to_name: &str) -> Result<PathBuf, Error> {
        let listed = trace.canonicalize().ok().and_then(|canonical| self.listed.get(&canonical));
        if let Some(listed) = listed {
            return Ok(listed.annotations.clone());
        }
        match &self.unlisted {
            Unlisted::Beside => find_annotations(trace, how_to_name),
            Unlisted::In(dir) => {
                let rank = rank_of_name(trace);
                let found = rank.and_then(|rank| rank_annotations_in(dir, rank));
                found.ok_or_else(|| unpaired(trace, rank, dir, how_to_name))
            }
        }
    }

    /// The traces that annotation files list and that do not exist (any more): they
    /// are left out, and are no failure.
    pub fn missing(&self) -> impl ExactSizeIterator<Item = &Path> {
        self.missing.iter().map(PathBuf::as_path)
    }

    /// Whether the annotation files found in `dir` list a trace that exists.
    fn lists_traces_from(&self, dir: &Path) -> bool {
        dir.canonicalize().is_ok_and(|dir| self.listed.values().any(|listed| listed.directory == dir))
    }

    /// Read the annotation files directly in `dir` (once, however often it is named)
    /// and pair the traces they list with them.
    fn read_directory(&mut self, dir: &Path) -> Result<(), Error> {
        let cannot_list =
            |e| Error::Inputs { message: format!("{}: cannot list the directory ({e})", dir.display()) };
        let canonical = dir.canonicalize().map_err(cannot_list)?;
        if self.read.contains(&canonical) {
            return Ok(());
        }
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .map_err(cannot_list)?
            .filter_map(|entry| entry.ok())
            .filter_map(|entry| entry.file_name().into_string().ok())
            .filter(|name| is_annotation_file_name(name))
            .collect();
        names.sort();
        for name in names {
            let annotations = dir.join(name);
            for trace in read_traces(&annotations)? {
                let trace = dir.join(trace);
                if trace.file_name().is_some_and(|n| n.to_string_lossy().contains(".annotated.")) {
                    continue;
                }
                let Ok(key) = trace.canonicalize() else {
                    self.missing.insert(trace);
                    continue;
                };
                if let Some(earlier) = self.listed.get(&key).filter(|l| l.annotations != annotations) {
                    return Err(Error::annotations(
                        None,
                        format!(
                            "{} is listed by two annotation files, {} and {}; annotate it with the right one named",
                            trace.display(),
                            earlier.annotations.display(),
                            annotations.display()
                        ),
                    ));
                }
                let listed = Listed { trace, annotations: annotations.clone(), directory: canonical.clone() };
                self.listed.insert(key, listed);
            }
        }
        self.read.push(canonical);
        Ok(())
    }
}

/// Why `trace` (of `rank`, where its name starts with one) has no annotation file in `dir`.
fn unpaired(trace: &Path, rank: Option<u64>, dir: &Path, how_to_name: &str) -> Error {
    let no_rank_file = match rank {
        Some(rank) => format!("none there is rank {rank}'s (kernel_annotations_rank{rank}_*.json or .pkl)"),
        None => "its name starts with no rank to find one by (kernel_annotations_rank<R>_*.json or .pkl, \
                 for a trace whose name starts with R)"
            .into(),
    };
    let (dir, trace) = (dir.display(), trace.display());
    Error::annotations(
        None,
        format!("no annotation file in {dir} lists {trace}, and {no_rank_file}; {how_to_name}"),
    )
}

/// `kernel_annotations_rank{R}_{ID}.json[.gz]`: the name of an annotation file that
/// `cgfast run` (and `cgfast.profiler.trace_handler`) writes.
fn is_annotation_file_name(name: &str) -> bool {
    let stem = name.strip_suffix(".json").or_else(|| name.strip_suffix(".json.gz"));
    let rank_and_id = stem.and_then(|stem| stem.strip_prefix("kernel_annotations_rank"));
    rank_and_id.and_then(|r| r.split_once('_')).is_some_and(|(rank, id)| {
        !rank.is_empty() && rank.bytes().all(|b| b.is_ascii_digit()) && !id.is_empty()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{write_annotations, Annotations};

    fn touch(path: &Path) -> PathBuf {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, b"{}").unwrap();
        path.to_path_buf()
    }

    /// An annotation file listing `traces`.
    fn listing(path: &Path, traces: &[&Path]) -> PathBuf {
        let annotations =
            Annotations { traces: traces.iter().map(|t| t.to_path_buf()).collect(), ..Default::default() };
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        write_annotations(path, &annotations).unwrap();
        path.to_path_buf()
    }

    #[test]
    fn listed_traces_are_paired_with_their_files_wherever_they_are() {
        let root = tempfile::tempdir().unwrap();
        let (out, elsewhere) = (root.path().join("out"), root.path().join("profiles"));
        let first = touch(&elsewhere.join("worker0.111.pt.trace.json.gz"));
        let second = touch(&elsewhere.join("worker0.222.pt.trace.json.gz"));
        let gone = elsewhere.join("worker0.333.pt.trace.json.gz");
        let a = listing(&out.join("kernel_annotations_rank0_11.json"), &[&first, &gone]);
        let b = listing(&out.join("kernel_annotations_rank0_22.json.gz"), &[&second]);
        listing(&out.join("kernel_annotations_rank0_33.json.bak"), &[&touch(&elsewhere.join("x.json"))]);
        let (traces, pairing) = find_paired_traces(std::slice::from_ref(&out)).unwrap();
        assert_eq!(traces, [first.clone(), second.clone()]);
        assert_eq!(pairing.annotations_of(&first, "").unwrap(), a);
        assert_eq!(pairing.annotations_of(&second, "").unwrap(), b);
        assert_eq!(pairing.missing().collect::<Vec<_>>(), [gone.as_path()]);
        // through another path to the same file
        let roundabout = out.join("..").join("profiles").join("worker0.222.pt.trace.json.gz");
        assert_eq!(pairing.annotations_of(&roundabout, "").unwrap(), b);
    }

    #[test]
    fn traces_found_come_first_each_once_and_unlisted_ones_go_by_rank() {
        let root = tempfile::tempdir().unwrap();
        let out = root.path().join("out");
        let listed = touch(&out.join("step_1/000000.5.pt.trace.json"));
        let unlisted = touch(&out.join("step_1/000001.5.pt.trace.json"));
        let away = touch(&root.path().join("away/trace.json"));
        let rank0 = listing(&out.join("kernel_annotations_rank0_5.json"), &[&listed, &away]);
        let rank1 = listing(&out.join("kernel_annotations_rank1_6.json"), &[]);
        // the directory named twice is read once: its files list no trace twice
        let (traces, pairing) = find_paired_traces(&[out.clone(), out.join("."), unlisted.clone()]).unwrap();
        assert_eq!(traces, [listed.clone(), unlisted.clone(), away.clone()]);
        assert_eq!(pairing.annotations_of(&listed, "").unwrap(), rank0);
        assert_eq!(pairing.annotations_of(&unlisted, "").unwrap(), rank1);
        let stranger = touch(&out.join("step_1/000002.5.pt.trace.json"));
        let error = pairing.annotations_of(&stranger, "use -a to name them").unwrap_err().to_string();
        assert!(
            error.starts_with("could not find the annotations of") && error.ends_with("use -a to name them")
        );
    }

    #[test]
    fn relative_paths_are_taken_from_the_file_and_outputs_are_left_out() {
        let root = tempfile::tempdir().unwrap();
        let out = root.path().join("out");
        let trace = touch(&root.path().join("t/worker1.9.pt.trace.json"));
        let output = touch(&root.path().join("t/worker1.9.pt.trace.annotated.json"));
        let file = listing(
            &out.join("kernel_annotations_rank1_9.json"),
            &[Path::new("../t/worker1.9.pt.trace.json"), &output],
        );
        let (traces, pairing) = find_paired_traces(std::slice::from_ref(&out)).unwrap();
        assert_eq!(traces, [out.join("../t/worker1.9.pt.trace.json")]);
        assert_eq!(pairing.annotations_of(&trace, "").unwrap(), file);
        assert_eq!(pairing.missing().len(), 0);
    }

    #[test]
    fn a_directory_with_nothing_to_annotate_is_still_an_error() {
        let root = tempfile::tempdir().unwrap();
        let out = root.path().join("out");
        listing(&out.join("kernel_annotations_rank0_1.json"), &[&root.path().join("gone.json")]);
        let error = find_paired_traces(std::slice::from_ref(&out)).unwrap_err().to_string();
        assert!(error.starts_with("no traces (*.trace.json or *.trace.json.gz) under"), "{error}");
    }

    #[test]
    fn a_trace_listed_by_two_files_is_an_error_naming_both() {
        let root = tempfile::tempdir().unwrap();
        let out = root.path().join("out");
        let trace = touch(&root.path().join("t.json"));
        let a = listing(&out.join("kernel_annotations_rank0_1.json"), &[&trace]);
        let b = listing(&out.join("kernel_annotations_rank1_2.json"), &[&trace]);
        let error = Pairing::in_directory(&out).unwrap_err().to_string();
        assert_eq!(
            error,
            format!(
                "{} is listed by two annotation files, {} and {}; annotate it with the right one named",
                trace.display(),
                a.display(),
                b.display()
            )
        );
    }

    #[test]
    fn a_malformed_file_is_an_error_naming_it() {
        let root = tempfile::tempdir().unwrap();
        let file = root.path().join("kernel_annotations_rank0_1.json");
        std::fs::write(
            &file,
            r#"{"format": "cgfast-annotations", "version": 1, "annotations": {}, "traces": "t.json"}"#,
        )
        .unwrap();
        let error = find_paired_traces(&[root.path().to_path_buf()]).unwrap_err().to_string();
        assert!(error.starts_with(&format!("{}: \"traces\" is", file.display())), "{error}");
    }

    #[test]
    fn a_file_that_does_not_parse_lists_nothing_and_is_still_its_ranks() {
        let root = tempfile::tempdir().unwrap();
        let trace = touch(&root.path().join("000002.1.pt.trace.json"));
        let corrupt = root.path().join("kernel_annotations_rank2_1.json");
        std::fs::write(&corrupt, b"{\"format\": \"cgfast-annotations\", \"traces\": [").unwrap();
        let (traces, pairing) = find_paired_traces(&[root.path().to_path_buf()]).unwrap();
        assert_eq!(traces, std::slice::from_ref(&trace));
        assert_eq!(pairing.annotations_of(&trace, "").unwrap(), corrupt, "reading it says what is wrong");
    }

    #[test]
    fn in_a_directory_an_unlisted_trace_gets_its_ranks_file_there_or_an_error_naming_it() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("annotations");
        let rank2 = listing(&dir.join("kernel_annotations_rank2_1.json"), &[]);
        touch(&root.path().join("kernel_annotations_rank3_1.json")); // not in the directory
        let pairing = Pairing::in_directory(&dir).unwrap();
        let traces = root.path().join("traces");
        assert_eq!(pairing.annotations_of(&traces.join("000002.1.pt.trace.json"), "").unwrap(), rank2);
        let hint = "use -a FILE to name them";
        let error =
            pairing.annotations_of(&traces.join("000003.1.pt.trace.json"), hint).unwrap_err().to_string();
        assert_eq!(
            error,
            format!(
                "no annotation file in {} lists {}, and none there is rank 3's \
                 (kernel_annotations_rank3_*.json or .pkl); {hint}",
                dir.display(),
                traces.join("000003.1.pt.trace.json").display()
            )
        );
        let error =
            pairing.annotations_of(&traces.join("worker0.1.pt.trace.json"), hint).unwrap_err().to_string();
        assert!(
            error.contains(&format!("in {} lists", dir.display())) && error.contains("starts with no rank")
        );
        assert!(error.ends_with(hint) && !error.contains('\n'));
    }

    #[test]
    fn annotation_file_names() {
        for name in ["kernel_annotations_rank0_1.json", "kernel_annotations_rank12_345.json.gz"] {
            assert!(is_annotation_file_name(name), "{name}");
        }
        for name in [
            "kernel_annotations_rank0_1.pkl",
            "kernel_annotations_rank_1.json",
            "kernel_annotations_rankx_1.json",
            "kernel_annotations_rank0_.json",
            "kernel_annotations_rank0.json",
            "annotations.json",
        ] {
            assert!(!is_annotation_file_name(name), "{name}");
        }
    }
}
