//! What a run of [`annotate_file`](crate::annotate_file) is told: [`Options`], whose
//! `Default` is the one set of defaults the command line and the Python bindings show
//! as theirs, and the names its choices go by ([`Recover`], [`Lanes`], [`Spans`]).

use std::fmt;
use std::str::FromStr;

use crate::Error;

/// How [`annotate_file`](crate::annotate_file) treats a trace. `Options::default()`
/// holds the defaults; a front end changes the fields it was told about, checks them
/// with [`Options::check`] and, for the switches that come from the environment, calls
/// [`Options::with_environment`] once per run (nothing in the core reads it).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Options {
    /// The lane of graphed events that no annotation puts elsewhere.
    pub default_stream: i64,
    /// The lane that overlapping kernels of the default lane move to.
    pub overlap_stream: i64,
    /// The largest overlap, in microseconds, repaired as timestamp jitter; larger ones
    /// are left as they are and counted.
    pub max_adjust_us: f64,
    /// Whether node ids are recovered from the recorded graph topology.
    pub recover: Recover,
    /// Recover by the recorded topology alone: ignore `cgfast.replay` stamps and leave
    /// replays that several graphs fit unannotated, even where all agree.
    pub topology_only: bool,
    /// The dotted annotation key whose scopes get spans, or none.
    pub spans: Spans,
    /// Whether graphed events move to the lanes their annotations name.
    pub lanes: Lanes,
    /// The gzip level of a `.gz` output, 0 to 9.
    pub gzip_level: u32,
    /// Threads a run may use; 0 for one per core (`CGFAST_THREADS`).
    pub threads: usize,
    /// How a large plain output is written (`CGFAST_DIRECT_IO`).
    pub write_mode: WriteMode,
    /// Say on stderr, at each stage of the run, its time, CPU time and memory so far
    /// (`CGFAST_TIMING`).
    pub timing: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            default_stream: 7,
            overlap_stream: 8,
            max_adjust_us: 1.0,
            recover: Recover::Auto,
            topology_only: false,
            spans: Spans::default(),
            lanes: Lanes::All,
            gzip_level: 3,
            threads: 0,
            write_mode: WriteMode::Adaptive,
            timing: false,
        }
    }
}

impl Options {
    /// Whether the values are ones the options take (the enums are by their types): a
    /// [`Error::BadOption`] naming the first that is not.
    pub fn check(&self) -> Result<(), Error> {
        if !self.max_adjust_us.is_finite() || self.max_adjust_us < 0.0 {
            return Err(Error::bad_option(
                "max_adjust_us",
                format!("must be a non-negative number, not {}", self.max_adjust_us),
            ));
        }
        if self.gzip_level > 9 {
            return Err(Error::bad_option("gzip_level", format!("must be 0 to 9, not {}", self.gzip_level)));
        }
        if let Spans::Key(key) = &self.spans {
            if key.is_empty() {
                return Err(Error::bad_option("spans", "needs an annotation key, or none".into()));
            }
        }
        Ok(())
    }

    /// These options with the switches the environment sets: `CGFAST_THREADS` (a
    /// positive number of threads), `CGFAST_TIMING` (set: [`Options::timing`]) and
    /// `CGFAST_DIRECT_IO` (`0` buffered, `1` direct). For front ends, once per run.
    pub fn with_environment(mut self) -> Options {
        if let Some(threads) =
            std::env::var("CGFAST_THREADS").ok().and_then(|t| t.parse::<usize>().ok()).filter(|&t| t > 0)
        {
            self.threads = threads;
        }
        if std::env::var_os("CGFAST_TIMING").is_some() {
            self.timing = true;
        }
        match std::env::var("CGFAST_DIRECT_IO").as_deref() {
            Ok("0") => self.write_mode = WriteMode::Buffered,
            Ok("1") => self.write_mode = WriteMode::Direct,
            _ => {}
        }
        self
    }

    /// The threads a run uses.
    pub(crate) fn thread_count(&self) -> usize {
        match self.threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        }
    }
}

/// The names of an option's choices, for `FromStr`, `Display` and a front end's help.
macro_rules! named_choices {
    ($type:ident, $option:literal, $($variant:ident => $name:literal),+) => {
        impl $type {
            /// The names of the choices, as `FromStr` takes them.
            pub const NAMES: &'static [&'static str] = &[$($name),+];

            /// The choice's name.
            pub fn name(self) -> &'static str {
                match self {
                    $($type::$variant => $name),+
                }
            }
        }

        impl FromStr for $type {
            type Err = Error;

            fn from_str(text: &str) -> Result<Self, Error> {
                match text {
                    $($name => Ok($type::$variant),)+
                    other => Err(Error::bad_option($option, format!("must be {}, not {other:?}", one_of(Self::NAMES)))),
                }
            }
        }

        impl fmt::Display for $type {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

/// `'a', 'b' or 'c'`.
fn one_of(names: &[&str]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("'{n}'")).collect();
    match quoted.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// When node ids are recovered from the recorded graph topology.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Recover {
    /// For the replays whose events carry no `graph node id`.
    #[default]
    Auto,
    /// For every replay, recomputing the ids it has.
    Always,
    /// Never.
    Never,
}

named_choices!(Recover, "recover", Auto => "auto", Always => "always", Never => "never");

/// Whether graphed events move to the lanes their annotations name (torch 2.15's
/// `graph_lanes`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Lanes {
    /// Move them (the reference's behaviour); a moved event keeps the lane it ran on as
    /// `args["original_stream"]`.
    #[default]
    All,
    /// Move none for annotations; a stream an annotation names is written as
    /// `args["annotated_stream"]`. The overlap lane and timestamp repair still apply.
    None,
    /// Move them as `All` does, without `original_stream`: the reference's output
    /// exactly (with no spans).
    Reference,
}

named_choices!(Lanes, "lanes", All => "all", None => "none", Reference => "reference");

/// Which scope spans a run adds: one `gpu_user_annotation` event per run of a replay's
/// events on a lane that share a prefix of an annotation key's dotted value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Spans {
    /// None.
    Off,
    /// Spans for the scopes of this key's values.
    Key(String),
}

impl Spans {
    /// The key whose scopes get spans, if any.
    pub fn key(&self) -> Option<&str> {
        match self {
            Spans::Off => None,
            Spans::Key(key) => Some(key),
        }
    }
}

impl Default for Spans {
    /// Spans for the modules that `annotate_modules` records.
    fn default() -> Self {
        Spans::Key("module".into())
    }
}

impl FromStr for Spans {
    type Err = Error;

    /// A key, or `none` for no spans.
    fn from_str(text: &str) -> Result<Self, Error> {
        match text {
            "" => Err(Error::bad_option("spans", "needs an annotation key, or none".into())),
            "none" => Ok(Spans::Off),
            key => Ok(Spans::Key(key.into())),
        }
    }
}

impl fmt::Display for Spans {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.key().unwrap_or("none"))
    }
}

/// How a large plain output is written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WriteMode {
    /// Through the page cache.
    Buffered,
    /// Directly to the device where the file system allows.
    Direct,
    /// Buffered while that is fast, then directly (see `write/direct_io.rs`).
    #[default]
    Adaptive,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choices_read_and_print_their_names() {
        for name in Recover::NAMES {
            assert_eq!(name.parse::<Recover>().unwrap().to_string(), *name);
        }
        for name in Lanes::NAMES {
            assert_eq!(name.parse::<Lanes>().unwrap().to_string(), *name);
        }
        let bad = "sometimes".parse::<Recover>().unwrap_err();
        assert_eq!(bad.to_string(), "recover must be 'auto', 'always' or 'never', not \"sometimes\"");
        assert_eq!("module".parse::<Spans>().unwrap(), Spans::default());
        assert_eq!("none".parse::<Spans>().unwrap(), Spans::Off);
        assert_eq!(Spans::Off.to_string(), "none");
        assert!("".parse::<Spans>().is_err());
    }

    #[test]
    fn check_names_the_option_at_fault() {
        assert!(Options::default().check().is_ok());
        for (options, name) in [
            (Options { max_adjust_us: -1.0, ..Options::default() }, "max_adjust_us"),
            (Options { max_adjust_us: f64::NAN, ..Options::default() }, "max_adjust_us"),
            (Options { gzip_level: 10, ..Options::default() }, "gzip_level"),
            (Options { spans: Spans::Key(String::new()), ..Options::default() }, "spans"),
        ] {
            match options.check() {
                Err(Error::BadOption { option, .. }) => assert_eq!(option, name),
                other => panic!("{name}: {other:?}"),
            }
        }
    }
}
