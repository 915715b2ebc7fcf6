//! Why a run failed: one [`Error`], whose message is one line naming the file at fault
//! (and where in it, where that is known).

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// Why annotating, summarising, or reading or writing annotations failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A file could not be read or written.
    Io {
        /// The file.
        path: PathBuf,
        /// Whether it was being written (an output) rather than read.
        writing: bool,
        /// What the system said.
        source: io::Error,
    },
    /// A trace that is not one: not JSON, or no object with a `traceEvents` list.
    Syntax {
        /// The trace.
        path: PathBuf,
        /// What is wrong (`not a valid trace: expected ',' or ']' between events`).
        message: String,
        /// Where, as a byte offset in the trace's (decompressed) JSON, where known.
        offset: Option<u64>,
    },
    /// Annotations that cannot be used: a file that is no annotation file, annotations
    /// that cannot be found, or an annotation that cannot be applied.
    Annotations {
        /// The annotation file, where there is one.
        path: Option<PathBuf>,
        /// What is wrong.
        message: String,
    },
    /// Inputs that name nothing to work on (a directory without traces, a pattern that
    /// matches none, a chart that is no `.svg` or `.html`), or that cannot be worked on
    /// together (the two sides of a diff keyed differently, a side without replays).
    Inputs {
        /// What is wrong.
        message: String,
    },
    /// The run was cancelled through its [`CancelToken`](crate::CancelToken).
    Cancelled,
    /// An option whose value it does not take.
    BadOption {
        /// The option, as the field of [`Options`](crate::Options) (or
        /// [`SummaryOptions`](crate::SummaryOptions)) that holds it: `max_adjust_us`.
        option: &'static str,
        /// What is wrong with the value: `must be a non-negative number, not -1`.
        problem: String,
    },
    /// A bug in cgfast, caught while working on `path`.
    Internal {
        /// The file being worked on.
        path: PathBuf,
    },
}

impl Error {
    pub(crate) fn read(path: &Path, source: io::Error) -> Error {
        Error::Io { path: path.to_path_buf(), writing: false, source }
    }

    pub(crate) fn write(path: &Path, source: io::Error) -> Error {
        Error::Io { path: path.to_path_buf(), writing: true, source }
    }

    pub(crate) fn bad_option(option: &'static str, problem: String) -> Error {
        Error::BadOption { option, problem }
    }

    pub(crate) fn annotations(path: Option<&Path>, message: impl Into<String>) -> Error {
        Error::Annotations { path: path.map(Path::to_path_buf), message: message.into() }
    }

    /// The same error again (for every run that one failure fails).
    pub(crate) fn duplicate(&self) -> Error {
        match self {
            Error::Io { path, writing, source } => Error::Io {
                path: path.clone(),
                writing: *writing,
                source: io::Error::new(source.kind(), source.to_string()),
            },
            Error::Syntax { path, message, offset } => {
                Error::Syntax { path: path.clone(), message: message.clone(), offset: *offset }
            }
            Error::Annotations { path, message } => {
                Error::Annotations { path: path.clone(), message: message.clone() }
            }
            Error::Inputs { message } => Error::Inputs { message: message.clone() },
            Error::Cancelled => Error::Cancelled,
            Error::BadOption { option, problem } => Error::BadOption { option, problem: problem.clone() },
            Error::Internal { path } => Error::Internal { path: path.clone() },
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { path, writing: false, source } => {
                write!(f, "{}: {}", path.display(), describe_io(source))
            }
            Error::Io { path, writing: true, source } => {
                write!(f, "{}: cannot write: {}", path.display(), describe_io(source))
            }
            Error::Syntax { path, message, offset: Some(at) } => {
                write!(f, "{}: {message} at byte {at}", path.display())
            }
            Error::Syntax { path, message, offset: None } => write!(f, "{}: {message}", path.display()),
            Error::Annotations { path: Some(path), message } => write!(f, "{}: {message}", path.display()),
            Error::Annotations { path: None, message } | Error::Inputs { message } => f.write_str(message),
            Error::Cancelled => f.write_str("interrupted"),
            Error::BadOption { option, problem } => write!(f, "{option} {problem}"),
            Error::Internal { path } => write!(
                f,
                "{}: internal error (a bug: please report it with the input that caused it)",
                path.display()
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// An I/O error in the words of a one-line message.
pub(crate) fn describe_io(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::NotFound => "no such file".into(),
        io::ErrorKind::PermissionDenied => "permission denied".into(),
        io::ErrorKind::UnexpectedEof => "the gzip data is truncated".into(),
        io::ErrorKind::InvalidInput | io::ErrorKind::InvalidData => {
            format!("corrupt or unreadable data ({e})")
        }
        _ => e.to_string(),
    }
}
