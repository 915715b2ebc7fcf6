//! Work on many files at once, on plain threads: [`annotate_files`], and the map that
//! it shares with the reads of summary and diff ([`read_files`]).

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, RecvTimeoutError};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use crate::files::paths::{default_output, find_annotations};
use crate::{annotate_file, Annotations, CancelToken, Error, Options, Pairing, Phase, Report};

/// How far the work on each file is, reported from the threads doing it.
pub trait FilesProgress: Sync {
    /// File `file` is `fraction` (0..1) done.
    fn advance(&self, file: usize, fraction: f64);
    /// File `file` is finished, well or not.
    fn finished(&self, file: usize, ok: bool);
    /// Called now and then on the calling thread, to show the progress.
    fn show(&self);
}

/// No progress shown.
#[derive(Clone, Copy, Debug, Default)]
pub struct Silent;

impl FilesProgress for Silent {
    fn advance(&self, _: usize, _: f64) {}
    fn finished(&self, _: usize, _: bool) {}
    fn show(&self) {}
}

/// How often `tick` is called while waiting for results.
const TICK: Duration = Duration::from_millis(100);

/// The number of threads `jobs` asks for: 0 means one per core.
pub(crate) fn threads(jobs: usize) -> usize {
    if jobs > 0 {
        jobs
    } else {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    }
}

/// `work(i, &items[i])` for every item on up to `jobs` threads (0: one per core),
/// results in item order. `done(i, &result)` runs on the calling thread as each
/// item finishes, `tick()` at least every 100 ms in between. A panic in `work` is
/// caught and leaves that item `None`, so one bad item does not stop the others.
pub(crate) fn map<T, R, W>(
    items: &[T],
    jobs: usize,
    work: W,
    done: &mut dyn FnMut(usize, Option<&R>),
    tick: &mut dyn FnMut(),
) -> Vec<Option<R>>
where
    T: Sync,
    R: Send,
    W: Fn(usize, &T) -> R + Sync,
{
    let threads = threads(jobs).min(items.len()).max(1);
    let next = AtomicUsize::new(0);
    let mut results: Vec<Option<Option<R>>> = items.iter().map(|_| None).collect();
    std::thread::scope(|scope| {
        let (tx, rx) = channel();
        for _ in 0..threads {
            let tx = tx.clone();
            let (next, work) = (&next, &work);
            scope.spawn(move || loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(item) = items.get(i) else { return };
                let result = catch_unwind(AssertUnwindSafe(|| work(i, item))).ok();
                if tx.send((i, result)).is_err() {
                    return;
                }
            });
        }
        drop(tx);
        loop {
            match rx.recv_timeout(TICK) {
                Ok((i, result)) => {
                    done(i, result.as_ref());
                    results[i] = Some(result);
                }
                Err(RecvTimeoutError::Timeout) => tick(),
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
    });
    results.into_iter().map(|r| r.expect("every item is worked on")).collect()
}

/// `read(path, progress)` for each of `paths` on `jobs` threads (0: one per core), as
/// [`map`] does, telling `progress` how far each file is and when it is finished. The
/// results in the order of `paths`; a panic in `read` is that file's [`Error::Internal`].
pub(crate) fn read_files<P, R>(
    paths: &[P],
    jobs: usize,
    progress: &dyn FilesProgress,
    read: impl Fn(&Path, &mut dyn FnMut(u64, u64)) -> Result<R, Error> + Sync,
) -> Vec<Result<R, Error>>
where
    P: AsRef<Path> + Sync,
    R: Send,
{
    let results = map(
        paths,
        jobs,
        |i, path| {
            read(path.as_ref(), &mut |done, total| progress.advance(i, done as f64 / total.max(1) as f64))
        },
        &mut |i, result| {
            progress.finished(i, matches!(result, Some(Ok(_))));
            progress.show();
        },
        &mut || progress.show(),
    );
    paths
        .iter()
        .zip(results)
        .map(|(path, result)| {
            result.unwrap_or_else(|| Err(Error::Internal { path: path.as_ref().to_path_buf() }))
        })
        .collect()
}

/// Where [`annotate_files`] takes each trace's annotations from.
#[derive(Clone, Copy, Debug)]
pub enum AnnotationsOf<'a> {
    /// These, for every trace.
    All(&'a Annotations),
    /// The annotation file found beside each trace (see
    /// [`find_annotations`](crate::find_annotations)), read once however many traces
    /// share it; `hint` ends the error where none is found.
    Found {
        /// How to name the annotations instead, in the caller's words.
        hint: &'a str,
    },
    /// The annotation file `pairing` gives each trace (see
    /// [`Pairing::annotations_of`]), read once however many traces share it; `hint`
    /// ends the error where there is none.
    Paired {
        /// Which file annotates each trace.
        pairing: &'a Pairing,
        /// How to name the annotations instead, in the caller's words.
        hint: &'a str,
    },
}

/// Annotate each of `traces` into `<trace>.annotated.json[.gz]` beside it, on `jobs`
/// threads (0: one per core), as [`annotate_file`] does. A failure is that trace's
/// alone; `done(i, &result)` hears of each trace as it finishes, and `progress` of how
/// far each is. The results, in the order of `traces`.
pub fn annotate_files(
    traces: &[PathBuf],
    annotations: AnnotationsOf<'_>,
    options: &Options,
    jobs: usize,
    cancel: &CancelToken,
    progress: &dyn FilesProgress,
    done: &mut dyn FnMut(usize, &Result<Report, Error>),
) -> Vec<Result<Report, Error>> {
    let files = AnnotationFiles::default();
    let annotate = |i: usize, trace: &PathBuf| -> Result<Report, Error> {
        let found;
        let loaded = match annotations {
            AnnotationsOf::All(given) => given,
            AnnotationsOf::Found { hint } => {
                found = files.get(&find_annotations(trace, hint)?)?;
                &found
            }
            AnnotationsOf::Paired { pairing, hint } => {
                found = files.get(&pairing.annotations_of(trace, hint)?)?;
                &found
            }
        };
        let output = default_output(trace);
        annotate_file(trace, loaded, &output, options, cancel, &mut |phase, done, total| {
            let part = done as f64 / total.max(1) as f64;
            progress.advance(
                i,
                match phase {
                    Phase::Reading => part / 2.0,
                    Phase::Writing => 0.5 + part / 2.0,
                },
            )
        })
    };
    let results = map(
        traces,
        jobs,
        annotate,
        &mut |i, result| {
            progress.finished(i, matches!(result, Some(Ok(_))));
            match result {
                Some(result) => done(i, result),
                None => done(i, &Err(Error::Internal { path: traces[i].clone() })),
            }
            progress.show();
        },
        &mut || progress.show(),
    );
    traces
        .iter()
        .zip(results)
        .map(|(trace, result)| result.unwrap_or_else(|| Err(Error::Internal { path: trace.clone() })))
        .collect()
}

/// Annotation files, each read once however many traces share it (the traces of one
/// rank over many steps do).
#[derive(Default)]
struct AnnotationFiles {
    loaded: Mutex<HashMap<PathBuf, Arc<OnceLock<Loaded>>>>,
}

/// An annotation file read, or why it could not be.
type Loaded = Result<Arc<Annotations>, Error>;

impl AnnotationFiles {
    fn get(&self, path: &Path) -> Result<Arc<Annotations>, Error> {
        let slot = self
            .loaded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(path.to_path_buf())
            .or_default()
            .clone();
        match slot.get_or_init(|| crate::read_annotations(path).map(Arc::new)) {
            Ok(annotations) => Ok(annotations.clone()),
            Err(e) => Err(e.duplicate()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_order_and_survives_panics() {
        let items: Vec<u32> = (0..50).collect();
        let mut finished = 0;
        let out = map(
            &items,
            4,
            |i, &x| {
                assert_ne!(x, 13, "unlucky");
                (i as u32) * x
            },
            &mut |_, _| finished += 1,
            &mut || {},
        );
        assert_eq!(finished, 50);
        assert!(out[13].is_none(), "the panic is caught");
        for (i, r) in out.iter().enumerate().filter(|(i, _)| *i != 13) {
            assert_eq!(r.as_ref(), Some(&((i * i) as u32)));
        }
        assert!(map(&Vec::<u32>::new(), 0, |_, &x| x, &mut |_, _| {}, &mut || {}).is_empty());
    }
}
