//! What a run asks of the operating system beyond reading and writing: a thread's
//! priority, memory given back, blocks reserved, files swapped, and the time, CPU time
//! and memory a run has taken so far.

use std::fs::File;
use std::io;
use std::path::Path;
use std::time::Instant;

/// The priority of a thread that runs on spare time (Linux threads have their own): a
/// tenth of the weight of a thread at 0, so that it takes little from the others, yet
/// on a machine that other processes keep busy gets a turn soon enough to hand its work
/// over (at 19 it may wait for one far longer).
#[cfg(target_os = "linux")]
const SPARE_TIME_NICE: i32 = 10;

/// Let the calling thread run mostly on what the other threads leave of the processors,
/// where the system allows.
pub(crate) fn run_on_spare_time() {
    #[cfg(target_os = "linux")]
    // SAFETY: plain system calls on the calling thread.
    unsafe {
        let thread = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, thread, SPARE_TIME_NICE);
    }
}

/// Return the memory that threads freed to the system (with glibc, free memory stays
/// with the thread's arena), so that a later peak does not stand on it.
pub(crate) fn give_back_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: no preconditions; it only releases free memory.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Reserve blocks for `bytes` of `file` where the file system can, without changing its
/// length.
pub(crate) fn reserve_blocks(file: &File, bytes: u64) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let Ok(len) = libc::off_t::try_from(bytes) else { return };
        // SAFETY: a descriptor the caller's `File` owns; it only reserves blocks.
        unsafe { libc::fallocate(file.as_raw_fd(), libc::FALLOC_FL_KEEP_SIZE, 0, len) };
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (file, bytes);
}

/// Swap two paths atomically (`renameat2` with `RENAME_EXCHANGE`); fails where either
/// does not exist or the file system can not.
#[cfg(target_os = "linux")]
pub(crate) fn exchange(a: &Path, b: &Path) -> io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let (a, b) = (CString::new(a.as_os_str().as_bytes())?, CString::new(b.as_os_str().as_bytes())?);
    // the system call, not glibc's wrapper, which older glibc lacks
    // SAFETY: both are NUL-terminated paths that live across the call.
    let done = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if done == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn exchange(_: &Path, _: &Path) -> io::Result<()> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

/// User and system time of the whole process so far.
fn cpu_seconds() -> f64 {
    #[cfg(unix)]
    {
        // SAFETY: getrusage fills the struct it is given.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } == 0 {
            let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
            return seconds(usage.ru_utime) + seconds(usage.ru_stime);
        }
    }
    f64::NAN
}

/// Where a run's time goes: when on, a line on stderr at each mark with the time, CPU
/// time and memory of the run so far.
pub(crate) struct Timing {
    started: Option<Instant>,
}

impl Timing {
    pub(crate) fn new(on: bool, started: Instant) -> Timing {
        Timing { started: on.then_some(started) }
    }

    pub(crate) fn mark(&self, what: &str) {
        let Some(started) = self.started else { return };
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let memory: Vec<&str> =
            status.lines().filter(|l| l.starts_with("VmHWM") || l.starts_with("VmRSS")).collect();
        eprintln!(
            "cgfast timing: {what} at {:.3} s, {:.3} s of CPU, {}",
            started.elapsed().as_secs_f64(),
            cpu_seconds(),
            memory.join(" ").split_whitespace().collect::<Vec<_>>().join(" ")
        );
    }
}
