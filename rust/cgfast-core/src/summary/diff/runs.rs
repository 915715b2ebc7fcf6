//! Which traces of a side are one run: the traces of one process. `trace_handler` (and
//! torch's `tensorboard_trace_handler`) name a trace `WORKER.NS.pt.trace.json[.gz]`,
//! `WORKER` being `[RANK.]HOST_PID` and `NS` the time it was written, so the profiling
//! windows of one process share a `WORKER`; any other trace is a run of its own. Ranks
//! are processes: pooled, each is a run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What makes traces one run.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum RunKey {
    /// The `WORKER` of a `WORKER.NS.pt.trace...` name.
    Worker(String),
    /// A trace named otherwise.
    File(PathBuf),
}

/// The `WORKER` of `WORKER.NS.pt.trace...` (annotated or not, gzipped or not).
fn worker_of_name(path: &Path) -> Option<String> {
    let name = path.file_name()?.to_str()?;
    let (stem, _) = name.split_once(".pt.trace")?;
    let (worker, written) = stem.rsplit_once('.')?;
    let stamp = !written.is_empty() && written.bytes().all(|b| b.is_ascii_digit());
    (stamp && !worker.is_empty()).then(|| worker.to_string())
}

fn key_of(path: &Path) -> RunKey {
    worker_of_name(path).map_or_else(|| RunKey::File(path.to_path_buf()), RunKey::Worker)
}

/// Each trace's run, numbered in the order of the runs' keys (workers before files,
/// each by name), so that the numbering does not depend on the order the traces were
/// given in.
pub(super) fn runs_of(paths: &[&Path]) -> Vec<u32> {
    let keys: Vec<RunKey> = paths.iter().map(|p| key_of(p)).collect();
    let mut numbers: BTreeMap<&RunKey, u32> = keys.iter().map(|k| (k, 0)).collect();
    for (n, number) in numbers.values_mut().enumerate() {
        *number = n as u32;
    }
    keys.iter().map(|k| numbers[k]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_from_the_names_trace_handlers_give() {
        let worker = |name: &str| worker_of_name(Path::new(name));
        assert_eq!(
            worker("traces/000001.host_417.1790857026123456789.pt.trace.json.gz").as_deref(),
            Some("000001.host_417")
        );
        assert_eq!(worker("000000.h_2.1.pt.trace.annotated.json").as_deref(), Some("000000.h_2"));
        // tensorboard_trace_handler: HOST_PID.MS.pt.trace.json
        assert_eq!(worker("gpu-3_88.1712.pt.trace.json").as_deref(), Some("gpu-3_88"));
        // no time stamp, no .pt.trace: a run of its own
        for name in
            ["000000.h200.pt.trace.json.gz", "base.annotated.json", ".5.pt.trace.json", "x.5a.pt.trace.json"]
        {
            assert_eq!(worker(name), None, "{name}");
        }
    }

    #[test]
    fn the_windows_of_one_process_are_one_run_whatever_the_order() {
        let paths = [
            "b/step_2/000000.h_7.222.pt.trace.annotated.json.gz",
            "other.annotated.json",
            "a/step_1/000000.h_7.111.pt.trace.annotated.json.gz",
            "a/000001.h_8.111.pt.trace.annotated.json.gz",
        ];
        fn as_paths<'a>(names: &[&'a str]) -> Vec<&'a Path> {
            names.iter().map(|&n| Path::new(n)).collect()
        }
        assert_eq!(runs_of(&as_paths(&paths)), [0, 2, 0, 1]);
        let reversed: Vec<&str> = paths.iter().rev().copied().collect();
        assert_eq!(runs_of(&as_paths(&reversed)), [1, 0, 2, 0]);
        // the same file twice is one run
        assert_eq!(runs_of(&as_paths(&["x.json", "x.json"])), [0, 0]);
    }
}
