//! One progress line on stderr for work on many files, fed from the worker threads.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use cgfast_core::FilesProgress;

pub struct Files {
    label: &'static str,
    enabled: bool,
    lengths: Vec<u64>,
    total_bytes: u64,
    /// Bytes-worth of work reported per file, and over all files.
    reported: Vec<AtomicU64>,
    done_bytes: AtomicU64,
    finished: AtomicU64,
    failed: AtomicU64,
    started: Instant,
    /// When the line was last drawn, `None` while nothing is shown.
    drawn: Mutex<Option<Instant>>,
}

const WIDTH: usize = 28;

impl Files {
    /// Shown only when `allowed`, on a terminal, for `min_bytes` of input or more.
    pub fn new(label: &'static str, files: &[PathBuf], allowed: bool, min_bytes: u64) -> Files {
        let lengths: Vec<u64> = files.iter().map(|f| std::fs::metadata(f).map_or(0, |m| m.len())).collect();
        let total_bytes = lengths.iter().sum();
        Files {
            label,
            enabled: allowed && total_bytes >= min_bytes && std::io::stderr().is_terminal(),
            reported: lengths.iter().map(|_| AtomicU64::new(0)).collect(),
            lengths,
            total_bytes,
            done_bytes: AtomicU64::new(0),
            finished: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            started: Instant::now(),
            drawn: Mutex::new(None),
        }
    }

    pub fn total_bytes(&self) -> u64 {
        self.total_bytes
    }

    /// Erase the line, before anything else is printed.
    pub fn clear(&self) {
        let mut drawn = self.drawn.lock().expect("progress lock");
        if drawn.take().is_some() {
            eprint!("\r{}\r", " ".repeat(WIDTH + 60));
            let _ = std::io::stderr().flush();
        }
    }
}

impl FilesProgress for Files {
    fn advance(&self, file: usize, fraction: f64) {
        let now = (self.lengths[file] as f64 * fraction.clamp(0.0, 1.0)) as u64;
        let before = self.reported[file].fetch_max(now, Ordering::Relaxed);
        if now > before {
            self.done_bytes.fetch_add(now - before, Ordering::Relaxed);
        }
    }

    fn finished(&self, file: usize, ok: bool) {
        self.advance(file, 1.0);
        self.finished.fetch_add(1, Ordering::Relaxed);
        if !ok {
            self.failed.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn show(&self) {
        if !self.enabled {
            return;
        }
        let mut drawn = self.drawn.lock().expect("progress lock");
        if drawn.is_some_and(|at| at.elapsed() < Duration::from_millis(100)) {
            return;
        }
        *drawn = Some(Instant::now());
        let done = self.done_bytes.load(Ordering::Relaxed);
        let fraction =
            if self.total_bytes > 0 { (done as f64 / self.total_bytes as f64).min(1.0) } else { 0.0 };
        let filled = (fraction * WIDTH as f64) as usize;
        let rate = done as f64 / 1e6 / self.started.elapsed().as_secs_f64().max(1e-9);
        let failed = match self.failed.load(Ordering::Relaxed) {
            0 => String::new(),
            n => format!(", {n} failed"),
        };
        eprint!(
            "\r{} [{}{}] {}/{} files{failed} {:5.1}% {rate:7.1} MB/s ",
            self.label,
            "#".repeat(filled),
            " ".repeat(WIDTH - filled),
            self.finished.load(Ordering::Relaxed),
            self.lengths.len(),
            fraction * 100.0
        );
        let _ = std::io::stderr().flush();
    }
}
