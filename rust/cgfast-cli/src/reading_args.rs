//! The options `summary` and `diff` share: how the traces are read and how values roll up
//! as module paths.

/// How the traces are read.
#[derive(clap::Args)]
pub struct Reading {
    /// Traces read at once [default: one per core].
    #[arg(short, long, value_parser = clap::value_parser!(u32).range(1..))]
    jobs: Option<u32>,
    /// Never show a progress bar.
    #[arg(long)]
    pub no_progress: bool,
}

impl Reading {
    /// Threads to read on (0: one per core).
    pub fn jobs(&self) -> usize {
        self.jobs.unwrap_or(0) as usize
    }
}

/// Values rolled up as module paths.
#[derive(clap::Args)]
pub struct RollUp {
    /// Roll values (module paths) up to their first N dotted segments:
    /// model.layers.3.mlp is model.layers at --depth 2.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    depth: Option<u32>,
    /// Merge numbered siblings: model.layers.0.mlp and model.layers.1.mlp count as
    /// model.layers.*.mlp.
    #[arg(long)]
    pub group_layers: bool,
}

impl RollUp {
    /// The dotted segments kept, if asked.
    pub fn depth(&self) -> Option<usize> {
        self.depth.map(|d| d as usize)
    }
}

/// `--hierarchy` / `--no-hierarchy` as asked: `None` leaves it to the key.
pub fn tree(hierarchy: bool, no_hierarchy: bool) -> Option<bool> {
    if hierarchy {
        Some(true)
    } else if no_hierarchy {
        Some(false)
    } else {
        None
    }
}
