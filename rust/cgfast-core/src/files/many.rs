//! Work on many files at once, on plain threads.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, RecvTimeoutError};
use std::time::Duration;

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
pub struct Silent;

impl FilesProgress for Silent {
    fn advance(&self, _: usize, _: f64) {}
    fn finished(&self, _: usize, _: bool) {}
    fn show(&self) {}
}

/// How often `tick` is called while waiting for results.
const TICK: Duration = Duration::from_millis(100);

/// The number of threads `jobs` asks for: 0 means one per core.
pub fn threads(jobs: usize) -> usize {
    if jobs > 0 {
        jobs
    } else {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    }
}

/// `work(i, &items[i])` for every item on up to `jobs` threads (0: one per core),
/// results in item order. `done(i, &result)` runs on the calling thread as each
/// item finishes, `tick()` at least every 100 ms in between. A panic in `work` is
/// caught and becomes that item's `Err`, so one bad item does not stop the others.
pub fn map<T, R, W>(
    items: &[T],
    jobs: usize,
    work: W,
    done: &mut dyn FnMut(usize, &Result<R, String>),
    tick: &mut dyn FnMut(),
) -> Vec<Result<R, String>>
where
    T: Sync,
    R: Send,
    W: Fn(usize, &T) -> R + Sync,
{
    let threads = threads(jobs).min(items.len()).max(1);
    let next = AtomicUsize::new(0);
    let mut results: Vec<Option<Result<R, String>>> = items.iter().map(|_| None).collect();
    std::thread::scope(|scope| {
        let (tx, rx) = channel();
        for _ in 0..threads {
            let tx = tx.clone();
            let (next, work) = (&next, &work);
            scope.spawn(move || loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(item) = items.get(i) else { return };
                let result = catch_unwind(AssertUnwindSafe(|| work(i, item))).map_err(|_| {
                    "internal error (a bug: please report it with the input that caused it)".to_string()
                });
                if tx.send((i, result)).is_err() {
                    return;
                }
            });
        }
        drop(tx);
        loop {
            match rx.recv_timeout(TICK) {
                Ok((i, result)) => {
                    done(i, &result);
                    results[i] = Some(result);
                }
                Err(RecvTimeoutError::Timeout) => tick(),
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
    });
    results.into_iter().map(|r| r.expect("every item is worked on")).collect()
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
        assert!(out[13].as_ref().unwrap_err().contains("internal error"));
        for (i, r) in out.iter().enumerate().filter(|(i, _)| *i != 13) {
            assert_eq!(r.as_ref().ok(), Some(&((i * i) as u32)));
        }
        assert!(map(&Vec::<u32>::new(), 0, |_, &x| x, &mut |_, _| {}, &mut || {}).is_empty());
    }
}
