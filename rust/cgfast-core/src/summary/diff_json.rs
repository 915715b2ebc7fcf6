//! The diff as JSON: what `cgfast diff --format json` prints and `cgfast.diff` returns.

use serde_json::{json, Value as Json};

use super::diff::{
    Comparison, Diff, DiffRow, KernelChange, Offender, SideInfo, SideStats, TraceInfo, RESAMPLES,
};
use super::diff_stats::CONFIDENCE;

/// A number, or `null` where it is not finite (an interval with no end).
fn finite(x: f64) -> Json {
    if x.is_finite() {
        json!(x)
    } else {
        Json::Null
    }
}

fn pct(fraction: f64) -> Json {
    finite(fraction * 100.0)
}

fn side_json(s: &SideStats) -> Json {
    json!({
        "replays": s.spread.count,
        "kernels_per_replay": s.kernels_per_replay,
        "median_us": s.median_us,
        "min_us": s.spread.min,
        "max_us": s.spread.max,
        "mean_us": s.spread.mean,
        "stdev_us": s.spread.stdev,
        "mean_all_us": s.mean_all_us,
        "total_us": s.total_us,
    })
}

fn kernel_json(k: &KernelChange) -> Json {
    json!({
        "name": k.name,
        "side": k.side(),
        "base_per_replay": k.base_per_replay.0,
        "test_per_replay": k.test_per_replay.0,
        "base_us": k.base_per_replay.1,
        "test_us": k.test_per_replay.1,
        "delta_us": k.delta_us(),
        "base_kernels": k.base.0,
        "test_kernels": k.test.0,
        "base_total_us": k.base.1,
        "test_total_us": k.test.1,
    })
}

/// A row; `explained_by`: the change of the mean busy time per replay it is a share of.
pub(crate) fn row_json(r: &DiffRow, mean_delta_us: f64, with_kernels: bool) -> Json {
    let mut v = json!({
        "value": r.value,
        "verdict": r.verdict.as_str(),
        "base_us": r.base.as_ref().map(|b| b.median_us),
        "test_us": r.test.as_ref().map(|t| t.median_us),
        "delta_us": r.delta_us(),
        "delta_pct": r.relative().map_or(Json::Null, pct),
        "ci_us": r.shift.map(|s| json!([finite(s.low), finite(s.high)])),
        "ci_pct": r.relative_interval().map(|(low, high)| json!([pct(low), pct(high)])),
        "contribution_us": r.contribution_us,
        "share_of_difference": if mean_delta_us != 0.0 { finite(r.contribution_us / mean_delta_us) } else { Json::Null },
        "base_share": r.base_share,
        "by_graph": r.by_graph,
        "base": r.base.as_ref().map(side_json),
        "test": r.test.as_ref().map(side_json),
    });
    if let Some((base, test)) = r.runs {
        v["runs"] = json!({"base": base, "test": test});
    }
    if with_kernels {
        v["kernels"] = json!({
            "base_per_replay": r.base.as_ref().map(|b| b.kernels_per_replay),
            "test_per_replay": r.test.as_ref().map(|t| t.kernels_per_replay),
            "names": r.kernels.iter().map(kernel_json).collect::<Vec<_>>(),
        });
    }
    v
}

fn info_json(s: &SideInfo) -> Json {
    json!({"traces": s.traces, "replays": s.replays, "kernels": s.kernels})
}

fn trace_json(t: &TraceInfo) -> Json {
    json!({
        "path": t.path.display().to_string(),
        "rank": t.rank,
        "events": t.events,
        "kernels": t.kernels,
        "replays": t.replays,
        "kernels_without_correlation": t.without_replay,
        "ungraphed_kernels": t.ungraphed,
        "ungraphed_us": t.ungraphed_ns as f64 / 1e3,
        "unusable_events": t.unusable,
    })
}

fn offender_json(o: &Offender) -> Json {
    json!({
        "rank": o.rank,
        "total": o.value.is_none(),
        "value": o.value.clone().flatten(),
        "delta_pct": pct(o.relative),
        "ci_pct": [pct(o.relative_interval.0), pct(o.relative_interval.1)],
    })
}

/// A comparison's fields; `runs`: with what it says of runs (not with `--pool-runs`).
fn comparison_json(c: &Comparison, tree: bool, runs: bool) -> serde_json::Map<String, Json> {
    let mut fields = serde_json::Map::new();
    fields.insert("graphs".into(), json!(c.graphs));
    fields.insert("base".into(), info_json(&c.base));
    fields.insert("test".into(), info_json(&c.test));
    if runs {
        fields.insert(
            "runs".into(),
            json!({
                "base": c.base.runs,
                "test": c.test.runs,
                "between_runs": c.between_runs(),
                "note": c.runs_line(),
            }),
        );
    }
    fields.insert("total".into(), row_json(&c.total, c.mean_delta_us, false));
    fields.insert("mean_delta_us".into(), json!(c.mean_delta_us));
    fields.insert("explained".into(), c.explained.map_or(Json::Null, finite));
    fields.insert("rows".into(), c.rows.iter().map(|r| row_json(r, c.mean_delta_us, true)).collect());
    if tree {
        fields.insert("tree".into(), c.tree.iter().map(|r| row_json(r, c.mean_delta_us, false)).collect());
    }
    fields
}

impl Diff {
    /// The whole report, as `--format json` prints it.
    pub fn to_json(&self) -> Json {
        let o = &self.options;
        let mut v = json!({
            "by": self.by,
            "by_default": o.by.is_none(),
            "by_note": self.by_note,
            "method": if self.pooled.between_runs() {
                format!("mean over runs of each run's median time per replay, test minus base, with a 95% interval from a hierarchical bootstrap (runs, then replays within them; {RESAMPLES} resamples) and Student's t")
            } else {
                "Hodges-Lehmann shift of per-replay times with its Mann-Whitney (Moses) interval".to_string()
            },
            "confidence": CONFIDENCE,
            "threshold_pct": o.threshold * 100.0,
            "min_change_pct": o.min_change * 100.0,
        });
        let fields = v.as_object_mut().expect("an object");
        if self.hierarchy.rolls_up() {
            fields.insert("depth".into(), json!(self.hierarchy.depth));
            fields.insert("group_layers".into(), json!(self.hierarchy.group_layers));
        }
        fields.insert(
            "traces".into(),
            json!({
                "base": self.base_traces.iter().map(trace_json).collect::<Vec<_>>(),
                "test": self.test_traces.iter().map(trace_json).collect::<Vec<_>>(),
            }),
        );
        let runs = !o.pool_runs;
        fields.extend(comparison_json(&self.pooled, self.hierarchy.tree, runs));
        if o.per_rank {
            let ranks: Vec<Json> = self
                .ranks
                .iter()
                .map(|c| {
                    let mut r = serde_json::Map::new();
                    r.insert("rank".into(), json!(c.rank));
                    r.extend(comparison_json(c, self.hierarchy.tree, runs));
                    Json::Object(r)
                })
                .collect();
            fields.insert("ranks".into(), Json::Array(ranks));
        }
        if let Some(limit) = o.fail_if_slower {
            let offenders: Vec<Json> = self.offenders().map(offender_json).collect();
            fields.insert(
                "gate".into(),
                json!({
                    "fail_if_slower_pct": limit * 100.0,
                    "min_share_pct": o.min_share * 100.0,
                    "failed": !offenders.is_empty(),
                    "offenders": offenders,
                }),
            );
        }
        fields.insert("notes".into(), json!(self.notes));
        v
    }
}
