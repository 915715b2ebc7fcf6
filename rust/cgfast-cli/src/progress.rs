//! A one-line progress display on stderr, shown only on a terminal for large inputs.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use cgfast_core::Phase;

pub struct Progress {
    enabled: bool,
    last: Instant,
    started: Instant,
    shown: bool,
}

/// Inputs this large show progress (on a terminal).
pub const LARGE_INPUT: u64 = 64 << 20;

impl Progress {
    pub fn new(input_len: u64, allowed: bool) -> Progress {
        let enabled = allowed && input_len >= LARGE_INPUT && std::io::stderr().is_terminal();
        Progress { enabled, last: Instant::now(), started: Instant::now(), shown: false }
    }

    pub fn update(&mut self, phase: Phase, done: u64, total: u64) {
        if !self.enabled || self.last.elapsed() < Duration::from_millis(100) || total == 0 {
            return;
        }
        self.last = Instant::now();
        let label = match phase {
            Phase::Reading => "reading",
            Phase::Writing => "writing",
        };
        let pct = (done as f64 / total as f64 * 100.0).min(100.0);
        let width = 30;
        let filled = (pct / 100.0 * width as f64) as usize;
        let rate = done as f64 / 1e6 / self.started.elapsed().as_secs_f64().max(1e-9);
        eprint!(
            "\r{label} [{}{}] {pct:5.1}% {rate:8.1} MB/s ",
            "#".repeat(filled),
            " ".repeat(width - filled)
        );
        let _ = std::io::stderr().flush();
        self.shown = true;
        if phase == Phase::Writing && done >= total {
            self.started = Instant::now();
        }
    }

    pub fn clear(&mut self) {
        if self.shown {
            eprint!("\r{}\r", " ".repeat(72));
            self.shown = false;
        }
    }
}
