//! The `cgfast` command line, as a library so that the Python console script runs
//! this same code in-process. Each command parses its flags into the core's options,
//! runs the core, and prints what it did.

mod annotate;
mod annotate_many;
mod diff;
mod diff_table;
mod diff_throughput;
mod files_progress;
mod progress;
mod reading_args;
mod summary;
mod summary_table;

use std::ffi::OsString;
use std::fmt;

use cgfast_core::{CancelToken, Error};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "cgfast",
    version,
    about = "Say which layer launched every kernel of a CUDA-graph profiler trace"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Join kernel annotations into a trace, give lanes, drop replicated noise, move
    /// overlapping kernels to their own lane and repair timestamp jitter.
    Annotate(annotate::Args),
    /// Where the GPU time of graph replays goes: per value of an annotation key, its
    /// kernels, time and share of the busy time, from one or more annotated traces.
    Summary(summary::Args),
    /// Which values got slower or faster between two runs (base and test), by how much
    /// and how sure: each graph replay a sample, a 95% interval of each change, and a
    /// gate for CI (--fail-if-slower, exit status 3).
    Diff(diff::Args),
    /// Run a command with cgfast active in every Python process it starts (no edit to the
    /// program): captures recorded, modules named, annotations saved at each trace
    /// export. Part of the Python package's `cgfast` (`cgfast run --help` there).
    Run(RunArgs),
}

/// `cgfast run` belongs to the Python package: its start-up hook is Python.
#[derive(clap::Args)]
#[command(disable_help_flag = true)]
struct RunArgs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    rest: Vec<OsString>,
}

const SUBCOMMANDS: &[&str] = &["annotate", "summary", "diff", "run", "help"];

/// The exit status of a run stopped by SIGINT or SIGTERM (128 + SIGINT, as shells do).
pub const INTERRUPTED: i32 = 130;

/// Why a command failed: the core's error, or a line of the command line's own. Either
/// exits with status 1, but a cancelled run with [`INTERRUPTED`].
#[derive(Debug)]
pub(crate) enum Failure {
    Core(Error),
    Said(String),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        Failure::Core(e)
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // an option is named by its flag
            Failure::Core(Error::BadOption { option, problem }) => {
                write!(f, "--{} {problem}", option.replace('_', "-"))
            }
            Failure::Core(e) => e.fmt(f),
            Failure::Said(line) => f.write_str(line),
        }
    }
}

/// Run the command line; returns the process exit status. `cancel` stops the run (a
/// signal handler, or the Python bindings on Ctrl-C, cancels it).
pub fn run<I, T>(argv: I, cancel: &CancelToken) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let mut args: Vec<OsString> = argv.into_iter().map(Into::into).collect();
    // `cgfast TRACE ...` works like the reference CLI: annotate is the default command.
    if let Some(first) = args.get(1).and_then(|a| a.to_str()) {
        if !first.starts_with('-') && !SUBCOMMANDS.contains(&first) {
            args.insert(1, "annotate".into());
        }
    }
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    let result = std::panic::catch_unwind(|| match cli.command {
        Command::Annotate(a) => match a.single_trace() {
            Some(trace) => annotate::run(&a, trace, cancel),
            None => annotate_many::run(&a, cancel),
        }
        .map(|()| 0),
        Command::Summary(a) => summary::run(a, cancel).map(|()| 0),
        Command::Diff(a) => diff::run(a, cancel),
        Command::Run(_) => {
            eprintln!(
                "cgfast: error: `cgfast run` is the Python package's (it starts programs under Python's \
                 start-up hook): pip install cgfast, then run that package's `cgfast run` or `python -m cgfast run`"
            );
            Ok(2)
        }
    });
    match result {
        Ok(Ok(status)) => status,
        Ok(Err(_)) if cancel.is_cancelled() => {
            eprintln!("cgfast: interrupted");
            INTERRUPTED
        }
        Ok(Err(failure)) => {
            eprintln!("cgfast: error: {failure}");
            1
        }
        Err(_) => {
            let at = LAST_PANIC.lock().ok().and_then(|mut p| p.take()).unwrap_or_default();
            eprintln!("cgfast: internal error{at} (a bug: please report it with the input that caused it)");
            1
        }
    }
}

/// Where the last panic happened (` at file:line`), for `run`'s one line.
static LAST_PANIC: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// Keep panics to one line: the hook only notes where, and `run` reports it.
pub fn quiet_panics() {
    std::panic::set_hook(Box::new(|info| {
        let at = info.location().map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
        if let Ok(mut last) = LAST_PANIC.lock() {
            *last = Some(at);
        }
    }));
}

/// Make SIGINT and SIGTERM cancel `cancel` (the run cleans up and exits 130); a second
/// signal ends the process at once.
#[cfg(unix)]
pub fn stop_on_signals(cancel: &CancelToken) -> std::io::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    for signal in [SIGINT, SIGTERM] {
        let cancel = cancel.clone();
        // SAFETY: the handler only loads and stores an atomic and calls _exit, all
        // async-signal-safe.
        unsafe {
            signal_hook::low_level::register(signal, move || {
                if cancel.is_cancelled() {
                    signal_hook::low_level::exit(INTERRUPTED);
                }
                cancel.cancel();
            })?;
        }
    }
    Ok(())
}

#[cfg(not(unix))]
pub fn stop_on_signals(_cancel: &CancelToken) -> std::io::Result<()> {
    Ok(())
}
