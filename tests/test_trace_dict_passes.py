"""cgfast.annotate_trace / move_overlapping_to_stream / fix_overlapping_timestamps on
plain dicts must give exactly what PyTorch 2.13.0's reference gives: the same dict
(values, number types and key order), the same return value, the same stdout."""

from __future__ import annotations

import collections
import contextlib
import copy
import io
from collections.abc import Mapping

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import cgfast
from helpers import assert_same_dicts

FUNCS = {
    "annotate": ("annotate_trace", "annotate_trace"),
    "move": ("_move_overlapping_to_stream", "move_overlapping_to_stream"),
    "fix": ("_fix_overlapping_timestamps", "fix_overlapping_timestamps"),
}


def call(fn, trace, *args, **kwargs):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        result = fn(trace, *args, **kwargs)
    return result, out.getvalue()


def compare(ref, which, trace, *args, reject_reference_errors=False, **kwargs):
    """Run the reference and cgfast on deep copies; assert identical outcomes; return
    cgfast's (trace, result, stdout). With ``reject_reference_errors`` (hypothesis), an
    input the reference itself fails on (e.g. sorting None with int lanes) is rejected."""
    ref_name, ours_name = FUNCS[which]
    a, b = copy.deepcopy(trace), copy.deepcopy(trace)
    args_a, args_b = copy.deepcopy(args), copy.deepcopy(args)
    try:
        r_ref, out_ref = call(getattr(ref, ref_name), a, *args_a, **kwargs)
    except (TypeError, ValueError, KeyError):
        if not reject_reference_errors:
            raise
        assume(False)
    r_ours, out_ours = call(getattr(cgfast, ours_name), b, *args_b, **kwargs)
    assert out_ours == out_ref, "stdout differs"
    assert r_ours == r_ref and type(r_ours) is type(r_ref), f"returned {r_ours!r}, reference {r_ref!r}"
    assert b == a, f"trace differs:\n  cgfast    {b}\n  reference {a}"
    assert repr(b) == repr(a), (
        f"trace equal but number types or key order differ:\n  cgfast    {b!r}\n  reference {a!r}"
    )
    return b, r_ours, out_ours


def chain(ref, trace, annotations, default_stream=7, overlap_stream=8, max_adjust_us=1.0, **kw):
    """annotate -> move -> fix, compared after each step."""
    t, n, _ = compare(ref, "annotate", trace, annotations, default_stream=default_stream, **kw)
    t, m, _ = compare(ref, "move", t, default_stream=default_stream, overlap_stream=overlap_stream, **kw)
    t, f, _ = compare(ref, "fix", t, max_adjust_us=max_adjust_us, **kw)
    return t, (n, m, f)


def K(tid, ts, node=None, dur=1, cat="kernel", pid=0, name=None, **args):
    """A GPU work event; ``node`` None means no graph node id key (use node=NULL for None)."""
    a = dict(args)
    if node is not None:
        a["graph node id"] = None if node is NULL else node
    e = {"ph": "X", "cat": cat, "pid": pid, "tid": tid, "ts": ts}
    if dur is not None:
        e["dur"] = dur
    if name is not None:
        e["name"] = name
    e["args"] = a
    return e


NULL = object()


def F(tid, ts, pid=0, ident=1):
    return {
        "ph": "f",
        "id": ident,
        "pid": pid,
        "tid": tid,
        "ts": ts,
        "cat": "ac2g",
        "name": "ac2g",
        "bp": "e",
    }


def S(tid, ts, pid=487, ident=1):
    return {"ph": "s", "id": ident, "pid": pid, "tid": tid, "ts": ts, "cat": "ac2g", "name": "ac2g"}


def U(tid, ts, pid=0, dur=5):
    return {
        "ph": "X",
        "cat": "gpu_user_annotation",
        "name": "## Call CompiledFxGraph ##",
        "pid": pid,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": {"External id": 1},
    }


def TN(tid, name=None, pid=0):
    return {
        "name": "thread_name",
        "ph": "M",
        "ts": 0,
        "pid": pid,
        "tid": tid,
        "args": {"name": name if name is not None else f"stream {tid} "},
    }


def TS(tid, pid=0):
    return {
        "name": "thread_sort_index",
        "ph": "M",
        "ts": 0,
        "pid": pid,
        "tid": tid,
        "args": {"sort_index": tid},
    }


def T(*events, **top):
    return {"traceEvents": list(events), **top}


# =========================================================================== annotate_trace


def test_dict_items_write_str_of_every_value(ref):
    trace = T(K(7, 10, node=5, stream=7, correlation=3))
    annotations = {
        5: [
            {"name": "layers.0.attn", "layer": 0, "w": 0.5, "big": 10**30, "none": None, "flag": True},
            {
                "nested": [1, "two", {"three": 3.0}],
                "d": {"k": ("t",)},
                "u": "µs ünï 中文 \U0001f600",
                "q": 'it\'s "q"\n',
            },
        ]
    }
    t, n, _ = compare(ref, "annotate", trace, annotations)
    assert n == 1
    args = t["traceEvents"][0]["args"]
    assert args["layer"] == "0" and args["w"] == "0.5" and args["none"] == "None" and args["flag"] == "True"
    assert args["nested"] == "[1, 'two', {'three': 3.0}]"


def test_later_items_win_and_existing_keys_are_overwritten(ref):
    trace = T(K(7, 10, node=5, name="k", stream=7, layer="old"))
    annotations = {5: [{"name": "outer", "layer": 1}, {"name": "inner"}, "label", {"layer": 2}, "label2"]}
    t, _n, _ = compare(ref, "annotate", trace, annotations)
    args = t["traceEvents"][0]["args"]
    assert (args["name"], args["layer"], args["annotation"]) == ("inner", "2", "label2")


@pytest.mark.parametrize("stream", [61, "61", 61.9, " 61 ", "+61", "6_1", True, -3, "-3", 0])
def test_stream_in_items_becomes_the_lane(ref, stream):
    trace = T(K(7, 10, node=5), F(7, 10), TN(7))
    t, _n, _ = compare(ref, "annotate", trace, {5: [{"name": "a", "stream": stream}]})
    assert t["traceEvents"][0]["tid"] == int(stream)
    assert t["traceEvents"][0]["args"]["stream"] == int(stream)


def test_last_item_naming_a_stream_wins(ref):
    trace = T(K(7, 10, node=5), K(7, 20, node=6), K(7, 30, node=7))
    annotations = {
        5: [{"stream": 60}, {"name": "x"}],
        6: [{"stream": 60}, {"stream": "61"}, "s"],
        7: ["just a label"],
    }
    t, _n, _ = compare(ref, "annotate", trace, annotations)
    assert [e["tid"] for e in t["traceEvents"][:3]] == [60, 61, 7]


@pytest.mark.parametrize("item", ["label", 5, 2.5, None, True, [1, 2], ("a", 1), b"raw"])
def test_non_dict_items_go_to_annotation(ref, item):
    trace = T(K(7, 10, node=5))
    t, _n, _ = compare(ref, "annotate", trace, {5: [item]})
    assert t["traceEvents"][0]["args"]["annotation"] == str(item)


def test_each_annotated_event_counts_once(ref):
    trace = T(
        K(7, 10, node=5), K(7, 20, node=5), K(7, 30, node=6), K(7, 40, node=9), K(7, 50, node=0), K(7, 60)
    )
    annotations = {5: [{"a": 1}, {"b": 2}, "c"], 6: [], 77: [{"unused": 1}]}
    _t, n, _ = compare(ref, "annotate", trace, annotations)
    assert n == 3  # node 5 twice, node 6 (an empty list still counts)


@pytest.mark.parametrize("default_stream", [7, 0, 3, 100, -1])
def test_graphed_events_without_a_stream_go_to_the_default(ref, default_stream):
    trace = T(
        K(20, 10, node=5),
        K(21, 10, node=9, cat="gpu_memcpy"),
        K(22, 10, node=0),
        K(23, 10),
        TN(20),
        TN(21),
        TN(22),
        TN(23),
    )
    compare(ref, "annotate", trace, {5: [{"name": "x"}]}, default_stream=default_stream)


def test_all_categories_are_reassigned(ref):
    # annotate_trace re-lanes every graphed event, whatever its category
    trace = T(
        K(7, 10, node=5, cat="gpu_memcpy"),
        K(7, 20, node=5, cat="gpu_memset"),
        K(7, 30, node=5, cat="cuda_runtime"),
        K(7, 40, node=6, cat="weird"),
        {"ph": "X", "tid": 9, "ts": 1, "args": {"graph node id": 5}},
    )
    compare(ref, "annotate", trace, {5: [{"stream": 60}]})


def test_flows_move_by_old_tid_and_ts(ref):
    trace = T(
        S(1, 5),
        K(7, 10, node=5),
        F(7, 10),  # at the kernel: moves
        F(7, 10, pid=3),  # same (tid, ts), another pid: the reference moves it too
        F(7, 10.0, ident=2),  # 10.0 == 10
        F(7, 11),  # another ts: stays (and is noise if lane 7 ends empty)
        F(143, 10),  # another tid: stays
        K(143, 30, node=6),
        F(143, 30),
        K(143, 40),  # eager work keeps lane 143
    )
    _t, _n, out = compare(ref, "annotate", trace, {5: [{"stream": 60}], 6: [{"stream": 143}]})
    assert out == "Removed 1 noise events from empty streams\n"


def test_flows_follow_only_the_annotate_move(ref):
    # two graphed events at one (tid, ts): the last one processed decides the flow's lane
    trace = T(K(7, 10, node=5), K(7, 10, node=6), F(7, 10))
    compare(ref, "annotate", trace, {5: [{"stream": 60}], 6: [{"stream": 61}]})
    trace = T(K(7, 10, node=6), K(7, 10, node=5), F(7, 10))
    compare(ref, "annotate", trace, {5: [{"stream": 60}], 6: [{"stream": 61}]})


def test_flow_index_ignores_flows_without_ts(ref):
    trace = T(
        K(7, 10, node=5),
        {"ph": "f", "cat": "ac2g", "tid": 7, "pid": 0},
        {"ph": "f", "cat": "ac2g", "pid": 0, "ts": 10},
    )
    compare(ref, "annotate", trace, {5: [{"stream": 60}]})


def test_noise_removal_and_its_line(ref):
    trace = T(
        K(7, 10, node=5),
        U(7, 5),
        U(20, 5),
        U(24, 5),
        F(20, 5),
        F(24, 5),
        S(20, 5),  # flow starts are never noise
        {"ph": "f", "cat": "other", "tid": 20, "ts": 5},
        {"ph": "X", "cat": "cpu_op", "tid": 20, "ts": 5},
    )
    _t, _n, out = compare(ref, "annotate", trace, {5: [{"stream": 60}]})
    assert out == "Removed 5 noise events from empty streams\n"


def test_no_noise_prints_nothing(ref):
    trace = T(K(7, 10, node=5), U(7, 5), F(7, 10), TN(7))
    _t, _n, out = compare(ref, "annotate", trace, {})
    assert out == ""


def test_metadata_of_unused_lanes_is_removed(ref):
    trace = T(
        {"name": "process_name", "ph": "M", "pid": 0, "tid": 0, "args": {"name": "python3"}},
        TN(7),
        TS(7),
        TN(20),
        TS(20),
        TN(24),
        TN(1399, name="thread 1399 (python3)", pid=487),
        {"ph": "X", "cat": "cpu_op", "pid": 487, "tid": 1399, "ts": 1, "dur": 2},
        K(7, 10, node=5),
        U(20, 5),
        {"ph": "M", "name": "thread_name", "tid": 99},  # no args
        {"ph": "M", "name": "process_labels", "args": {"labels": "GPU 0"}},  # no tid: None
    )
    compare(ref, "annotate", trace, {5: [{"stream": 60}]})


@pytest.mark.parametrize("gpu_pid", [0, 3, "gpu", None])
def test_thread_names_are_appended_sorted_with_the_gpu_pid(ref, gpu_pid):
    first = TN(20, pid=gpu_pid)
    if gpu_pid is None:
        del first["pid"]
    trace = T(
        TN(1399, name="thread 1399 (python3)", pid=487),  # not a "stream " name
        first,
        TN(21, pid=99),
        K(20, 1),
        K(21, 1),
        K(7, 10, node=5),
        K(7, 20, node=6),
        K(7, 30, node=7),
        K(7, 40, node=8),
    )
    t, _n, _out = compare(
        ref, "annotate", trace, {5: [{"stream": 61}], 6: [{"stream": 3}], 7: [{"stream": 200}]}
    )
    appended = [e for e in t["traceEvents"] if e.get("ph") == "M" and "ts" not in e]
    assert [e["tid"] for e in appended] == [3, 7, 61, 200]


def test_no_stream_thread_name_means_gpu_pid_zero(ref):
    trace = T(
        TN(1399, name="thread (python3)", pid=487),
        {"ph": "M", "name": "thread_name", "pid": 5, "tid": 2, "args": {"name": 7}},
        K(7, 10, node=5, pid=9),
    )
    compare(ref, "annotate", trace, {})


def test_gpu_pid_is_read_before_metadata_removal(ref):
    # the first "stream " thread_name belongs to an idle lane whose metadata goes away
    trace = T(TN(20, pid=4), TN(7, pid=0), K(7, 10, node=5), K(7, 20, node=6))
    compare(ref, "annotate", trace, {5: [{"stream": 60}]})


def test_stream_thread_name_with_non_string_name(ref):
    trace = T(
        {"ph": "M", "name": "thread_name", "pid": 6, "tid": 30, "args": {"name": ["stream ", 1]}},
        {"ph": "M", "name": "thread_name", "pid": 4, "tid": 31, "args": {"name": "stream 31"}},
        K(30, 1),
        K(31, 1),
        K(7, 10, node=5),
    )
    compare(ref, "annotate", trace, {})


@pytest.mark.parametrize("node", [0, 0.0, False, NULL, None])
def test_events_that_annotate_leaves_alone(ref, node):
    # graph node id 0 / 0.0 / False / None, or none at all, is not graphed for annotate_trace
    trace = T(K(20, 10, node=node, stream=20), TN(20), F(20, 10))
    t, n, _out = compare(ref, "annotate", trace, {0: [{"stream": 60}]})
    assert t["traceEvents"][0]["tid"] == 20 and n == 0


@pytest.mark.parametrize("node", [5.0, True, 5.5, "5", -5, 2**40 + 1])
def test_odd_graph_node_ids(ref, node):
    trace = T(K(20, 10, node=node), F(20, 10), TN(20))
    compare(
        ref,
        "annotate",
        trace,
        {5: [{"stream": 60}], 1: [{"stream": 61}], -5: [{"stream": 62}], 2**40 + 1: ["big"]},
    )


@pytest.mark.parametrize("node", [2**63 - 1, 2**63, 2**63 + 5, 2**64 - 1])
def test_node_ids_of_the_full_64_bit_range(ref, node):
    # CUDA graph node ids are unsigned 64-bit (exec graph id << 32 | local id)
    trace = T(K(7, 10, node=node), F(7, 10), TN(7))
    _t, n, _ = compare(ref, "annotate", trace, {node: [{"name": "x", "stream": 60}]})
    assert n == 1


def test_events_without_args(ref):
    trace = T(
        {"ph": "X", "cat": "kernel", "tid": 20, "ts": 1},
        {"ph": "X", "cat": "kernel", "tid": 7, "ts": 1, "dur": 2},
        K(7, 10, node=5),
        {"ph": "i", "name": "x"},
        {},
    )
    compare(ref, "annotate", trace, {5: [{"stream": 60}]})


def test_float_and_none_tids(ref):
    # tids as floats and None are kept as they are (7.0 == 7 as a dict key)
    trace = T(K(7.0, 10, node=5), F(7.0, 10), TN(7.0), K(None, 1), TN(None), U(8.0, 1), F(7, 1))
    compare(ref, "annotate", trace, {5: [{"name": "x"}]})


@pytest.mark.parametrize("tid", [7.0, 20.0, True])
def test_unnamed_work_lane_with_a_non_int_tid(ref, tid):
    # the appended thread_name carries the tid as the event had it: 7.0 -> "stream 7.0"
    trace = T(K(tid, 1, dur=2))
    compare(ref, "annotate", trace, {})


def test_custom_annotation_mappings(ref):
    class Ann(Mapping):
        def __init__(self, d):
            self.d = d

        def __getitem__(self, k):
            return self.d[k]

        def __iter__(self):
            return iter(self.d)

        def __len__(self):
            return len(self.d)

    trace = T(K(7, 10, node=5), K(7, 20, node=6))
    compare(ref, "annotate", trace, Ann({5: [{"stream": 60}], 6: ("tuple item",)}))
    dd = collections.defaultdict(list, {5: [{"stream": 60}]})
    compare(ref, "annotate", trace, dd)
    assert dict(dd) == {5: [{"stream": 60}]}, "the annotations must not gain entries"


def test_annotations_are_not_modified(ref):
    ann = {5: [{"name": "x", "stream": "60"}, "s"]}
    before = copy.deepcopy(ann)
    cgfast.annotate_trace(T(K(7, 10, node=5)), ann)
    assert ann == before


def test_other_top_level_keys_are_kept(ref):
    trace = T(K(7, 10, node=5), schemaVersion=1, traceName="x", deviceProperties=[{"id": 0}])
    compare(ref, "annotate", trace, {})


def test_empty_trace(ref):
    compare(ref, "annotate", T(), {})
    compare(ref, "move", T())
    compare(ref, "fix", T())


def test_missing_trace_events_raises():
    with pytest.raises(KeyError):
        cgfast.annotate_trace({}, {})
    with pytest.raises(TypeError):
        cgfast.move_overlapping_to_stream({"traceEvents": 5})


# =========================================================================== move_overlapping_to_stream


def test_overlapping_kernels_move(ref):
    trace = T(
        K(7, 0, node=1, dur=10),
        K(7, 5, node=2, dur=2),
        K(7, 9.5, node=3, dur=1),
        K(7, 10, node=4, dur=1),
        K(7, 10.5, node=5),
    )
    _t, m, _ = compare(ref, "move", trace)
    assert m == 3


def test_move_only_graphed_kernels_on_the_default_lane(ref):
    trace = T(
        K(7, 0, node=1, dur=10),
        K(7, 1, node=2, cat="gpu_memcpy"),
        K(7, 2, node=0),
        K(7, 3),
        K(20, 4, node=3),
        K(7, 5, node=NULL),  # None != 0: the lane passes treat it as graphed
        K(7, 6, node="x"),
        {"ph": "X", "cat": "kernel", "tid": 7, "ts": 7},  # no args
    )
    _t, m, _ = compare(ref, "move", trace)
    assert m == 2


@pytest.mark.parametrize("default_stream,overlap_stream", [(7, 8), (20, 21), (7, 7), (7, 20), (0, -1)])
def test_move_streams(ref, default_stream, overlap_stream):
    trace = T(
        K(20, 0, node=1, dur=10),
        K(20, 1, node=2),
        K(7, 0, node=1, dur=10),
        K(7, 1, node=2),
        K(0, 0, node=1, dur=3),
        K(0, 1, node=1),
    )
    compare(
        ref,
        "move",
        trace,
        default_stream=default_stream,
        overlap_stream=overlap_stream,
        reject_reference_errors=True,
    )


def test_move_sorts_stably_by_ts(ref):
    trace = T(
        K(7, 5, node=1, dur=3, name="a"),
        K(7, 0, node=2, dur=1, name="b"),
        K(7, 5, node=3, dur=1, name="c"),
        K(7, 5.0, node=4, dur=9, name="d"),
        K(7, 1, node=5, dur=0),
    )
    compare(ref, "move", trace)


def test_move_with_missing_dur_and_float_tid(ref):
    trace = T(K(7, 0, node=1, dur=None), K(7, 0, node=2), K(7.0, 0.5, node=3, dur=4), K(7, 1, node=4))
    compare(ref, "move", trace)


def test_move_negative_timestamps(ref):
    # prev_end starts at 0.0: a kernel starting before 0 "overlaps"
    trace = T(K(7, -5, node=1, dur=2), K(7, -1, node=2, dur=3), K(7, 1, node=3))
    compare(ref, "move", trace)


def test_move_without_args_stream(ref):
    trace = T(
        {"ph": "X", "cat": "kernel", "tid": 7, "ts": 0, "dur": 5, "args": {"graph node id": 1}},
        {"ph": "X", "cat": "kernel", "tid": 7, "ts": 1, "args": {"graph node id": 2}},
    )
    t, _m, _ = compare(ref, "move", trace)
    assert t["traceEvents"][1]["args"]["stream"] == 8


# =========================================================================== fix_overlapping_timestamps


def test_jitter_is_clamped(ref):
    trace = T(
        K(7, 0, node=1, dur=10),
        K(7, 9.5, node=2, dur=1),
        K(7, 10.2, node=3, dur=1),
        K(20, 3, node=4, dur=5),
        K(20, 7.25, node=5, cat="gpu_memcpy"),
    )
    _t, f, out = compare(ref, "fix", trace)
    assert f == 3 and out == ""


def test_large_overlaps_print_one_warning_each(ref):
    long_name = "void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, float>>(int)"
    trace = T(
        K(7, 0, node=1, dur=10, name="first"),
        K(7, 2, node=2, dur=5, name=long_name),
        K(7, 3, node=3, dur=1),  # no name: "?"
        K(20, 0, node=4, dur=10, cat="gpu_memset", name="Memset (Device)"),
        K(20, 8.999, node=5, dur=1, name="µ-kernel ünïcode " * 5),
    )
    _t, _f, out = compare(ref, "fix", trace)
    assert out.count("WARNING: large overlap") == 3


@pytest.mark.parametrize("max_adjust_us", [0.0, 0.5, 1.0, 2.0, 1000.0])
def test_fix_threshold(ref, max_adjust_us):
    trace = T(
        K(7, 0, node=1, dur=10),
        K(7, 9.5, node=2, dur=1),
        K(7, 9, node=3),
        K(7, 9.999, node=4, dur=2),
        K(7, 10, node=5),
        K(7, 12.0, node=6, dur=1),
    )
    compare(ref, "fix", trace, max_adjust_us=max_adjust_us)


def test_fix_int_and_float_times(ref):
    # the new ts has the type of prev_end: an int when ts and dur are ints
    trace = T(
        K(7, 0, node=1, dur=10),
        K(7, 10, node=2, dur=3),
        K(7, 12, node=3, dur=1),
        K(7, 13.0, node=4, dur=1),
        K(7, 13, node=5, dur=1.5),
        K(7, 15, node=6),
    )
    _t, f, _ = compare(ref, "fix", trace, max_adjust_us=1.5)
    assert f >= 2


def test_fix_negative_and_zero_times(ref):
    trace = T(
        K(7, -1, node=1, dur=1),
        K(20, -0.5, node=2, dur=1),
        K(21, -3, node=3),
        K(22, 0, node=4, dur=0),
        K(22, 0, node=5, dur=0),
    )
    compare(ref, "fix", trace)


def test_fix_includes_none_node_ids_and_skips_zero(ref):
    trace = T(
        K(7, 0, node=1, dur=10),
        K(7, 9.5, node=NULL),
        K(7, 9.6, node=0),
        K(7, 9.7),
        K(7, 9.8, node="s", cat="gpu_memset"),
        K(7, 9.9, node=5, cat="cuda_runtime"),
    )
    compare(ref, "fix", trace)


def test_fix_lanes_by_tid_as_python_sees_them(ref):
    # 7 and 7.0 are one lane; lanes are visited in first-seen order (warnings order)
    trace = T(
        K(20, 0, node=1, dur=10, name="a"),
        K(7, 0, node=1, dur=10, name="b"),
        K(7.0, 3, node=2, name="c"),
        K(20, 2, node=3, name="d"),
        K(None, 0, node=1, dur=5),
        K(None, 1, node=1, name="e"),
    )
    _t, _f, out = compare(ref, "fix", trace)
    assert out.count("WARNING") == 3


def test_fix_sorts_stably(ref):
    trace = T(
        K(7, 5, node=1, dur=1, name="x"),
        K(7, 5, node=2, dur=0.5, name="y"),
        K(7, 5.0, node=3, dur=2, name="z"),
        K(7, 4.5, node=4, dur=1),
    )
    compare(ref, "fix", trace)


def test_fix_missing_dur(ref):
    trace = T(
        K(7, 0, node=1, dur=None), K(7, 0, node=2, dur=3), K(7, 2.5, node=3, dur=None), K(7, 2.9, node=4)
    )
    compare(ref, "fix", trace)


# =========================================================================== the three in a row


def test_chain_of_the_three_passes(ref):
    trace = T(
        TN(7),
        TS(7),
        TN(20),
        TN(143),
        S(1399, 1),
        K(7, 10, node=5, dur=10, name="a"),
        F(7, 10),
        K(7, 15, node=6, dur=2, name="b"),
        F(7, 15),
        K(7, 19.5, node=7, dur=2, name="c"),
        K(143, 12, node=8, dur=3, cat="gpu_memcpy"),
        F(143, 12),
        U(20, 10, dur=20),
        F(20, 10),
        K(7, 40, node=0, name="eager"),
    )
    annotations = {5: [{"name": "l0"}], 6: [{"name": "l1"}, "x"], 8: [{"stream": "60"}]}
    chain(ref, trace, annotations)


# =========================================================================== hypothesis

TIDS = [7, 8, 20, 24, 60, 61, 143]
NODES = [1, 2, 3, 4, 5, 6, 8589934592, 8589934593]
text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=8)
simple_text = st.sampled_from(
    [
        "",
        "a",
        "layers.0.attn",
        "it's",
        'q"q',
        "back\\slash",
        "tab\tnew\nline",
        "µs",
        "ünï",
        "中文",
        "\U0001f600",
        "x" * 70,
    ]
)
times = st.one_of(
    st.integers(-3, 120),
    st.integers(0, 120_000).map(lambda n: n / 1000),
    st.sampled_from([0, 0.0, 10, 10.0, 10.5, 1e-7, 5361804758596.525]),
)
durs = st.one_of(st.integers(0, 30), st.integers(0, 30_000).map(lambda n: n / 1000), st.just(None))


def values(leaf_text=simple_text):
    leaves = st.one_of(
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=False),
        leaf_text,
        st.booleans(),
        st.none(),
    )
    return st.recursive(
        leaves,
        lambda kids: st.one_of(
            st.lists(kids, max_size=3), st.dictionaries(simple_text, kids, max_size=3), st.tuples(kids)
        ),
        max_leaves=6,
    )


streams = st.one_of(
    st.sampled_from(TIDS),
    st.integers(-2, 300),
    st.sampled_from(TIDS).map(str),
    st.sampled_from([60.9, " 61", "+60", True]),
)


def items(value_strategy):
    dict_item = st.dictionaries(
        st.sampled_from(["name", "module", "layer", "annotation", "x", "y"]), value_strategy, max_size=4
    ).flatmap(lambda d: st.one_of(st.just(d), streams.map(lambda s: {**d, "stream": s})))
    return st.lists(st.one_of(dict_item, simple_text, st.integers(0, 9)), max_size=4)


def annotations_strategy(value_strategy=None):
    return st.dictionaries(st.sampled_from([*NODES, 0, 99]), items(value_strategy or values()), max_size=8)


node_ids = st.one_of(st.sampled_from(NODES), st.sampled_from([0, NULL, 5.0, 0.0, "7"]))


@st.composite
def traces(draw, float_work_tids=False):
    events = []
    n = draw(st.integers(0, 30))
    work_tid = st.sampled_from(TIDS + ([7.0] if float_work_tids else []))
    any_tid = st.one_of(st.sampled_from(TIDS), st.sampled_from([7.0, 20.0, None, 1399]))
    pid = st.sampled_from([0, 0, 0, 1, 487])
    for _ in range(n):
        kind = draw(
            st.sampled_from(["graphed"] * 5 + ["eager", "flow_at", "flow", "start", "noise", "meta", "cpu"])
        )
        if kind in ("graphed", "eager"):
            cat = draw(st.sampled_from(["kernel"] * 4 + ["gpu_memcpy", "gpu_memset"]))
            args = {}
            if draw(st.booleans()):
                args["stream"] = draw(st.sampled_from(TIDS))
            if draw(st.booleans()):
                args["correlation"] = draw(st.integers(0, 9))
            if kind == "graphed":
                node = draw(node_ids)
                args["graph node id"] = None if node is NULL else node
            elif draw(st.booleans()):
                args["graph node id"] = 0
            e = {"ph": "X", "cat": cat, "pid": draw(pid), "tid": draw(work_tid), "ts": draw(times)}
            d = draw(durs)
            if d is not None:
                e["dur"] = d
            if draw(st.integers(0, 4)):
                e["name"] = draw(simple_text)
            if draw(st.integers(0, 9)) or kind == "graphed":
                e["args"] = args
            events.append(e)
        elif kind == "flow_at" and events:
            target = draw(st.sampled_from(events))
            if "ts" in target and not isinstance(target.get("tid"), str):
                events.append(
                    F(target.get("tid"), target["ts"], pid=draw(st.sampled_from([target.get("pid", 0), 1])))
                )
        elif kind == "flow":
            events.append(F(draw(any_tid), draw(times), pid=draw(pid)))
        elif kind == "start":
            events.append(S(draw(any_tid), draw(times)))
        elif kind == "noise":
            events.append(U(draw(any_tid), draw(times), pid=draw(pid)))
        elif kind == "meta":
            tid = draw(any_tid)
            which = draw(st.sampled_from(["tn", "tn_other", "sort", "proc"]))
            if which == "tn":
                events.append(TN(tid, pid=draw(pid)))
            elif which == "tn_other":
                events.append(TN(tid, name="thread (python3)", pid=draw(pid)))
            elif which == "sort":
                events.append(TS(tid, pid=draw(pid)))
            else:
                events.append(
                    {
                        "name": "process_name",
                        "ph": "M",
                        "pid": draw(pid),
                        "tid": tid,
                        "args": {"name": "python3"},
                    }
                )
            if draw(st.integers(0, 5)) == 0:
                # metadata with a work category counts as work (for lanes with int tids
                # only, unless float_work_tids)
                cats = ["gpu_user_annotation", "ac2g"]
                if float_work_tids or (isinstance(tid, int) and not isinstance(tid, bool)):
                    cats.append("kernel")
                events[-1]["cat"] = draw(st.sampled_from(cats))
        else:
            events.append(
                {
                    "ph": "X",
                    "cat": draw(st.sampled_from(["cpu_op", "cuda_runtime", "user_annotation"])),
                    "pid": 487,
                    "tid": draw(any_tid),
                    "ts": draw(times),
                    "dur": 1,
                    "args": {},
                }
            )
    trace = {"traceEvents": events}
    if draw(st.booleans()):
        trace["schemaVersion"] = 1
    return trace


SETTINGS = settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


@SETTINGS
@given(trace=traces(), annotations=annotations_strategy(), default_stream=st.sampled_from([7, 7, 20, 0]))
def test_hypothesis_annotate(ref, trace, annotations, default_stream):
    compare(ref, "annotate", trace, annotations, default_stream=default_stream, reject_reference_errors=True)


@SETTINGS
@given(
    trace=traces(), default_stream=st.sampled_from([7, 7, 20]), overlap_stream=st.sampled_from([8, 8, 21, 7])
)
def test_hypothesis_move(ref, trace, default_stream, overlap_stream):
    compare(
        ref,
        "move",
        trace,
        default_stream=default_stream,
        overlap_stream=overlap_stream,
        reject_reference_errors=True,
    )


@SETTINGS
@given(trace=traces(), max_adjust_us=st.sampled_from([1.0, 1.0, 0.0, 0.25, 5.0]))
def test_hypothesis_fix(ref, trace, max_adjust_us):
    compare(ref, "fix", trace, max_adjust_us=max_adjust_us, reject_reference_errors=True)


@SETTINGS
@given(trace=traces(), annotations=annotations_strategy(), default_stream=st.sampled_from([7, 7, 20]))
def test_hypothesis_chain(ref, trace, annotations, default_stream):
    chain(ref, trace, annotations, default_stream=default_stream, reject_reference_errors=True)


@settings(max_examples=60, deadline=None)
@given(value=values(leaf_text=text))
def test_hypothesis_str_of_any_unicode_value(ref, value):
    # annotate_trace applies Python's own str(): any value, any text
    trace = T(K(7, 10, node=5))
    compare(ref, "annotate", trace, {5: [{"v": value}, value]})


def test_compare_tells_number_types_and_key_order_apart():
    assert_same_dicts({"a": 1, "b": [1.5]}, {"a": 1, "b": [1.5]})
    for a, b in (
        ({"a": 1}, {"a": 1.0}),
        ({"a": 1, "b": 2}, {"b": 2, "a": 1}),
        ({"a": True}, {"a": 1}),
        ({"a": "1"}, {"a": 1}),
    ):
        with pytest.raises(AssertionError):
            assert_same_dicts(a, b)


# =========================================================================== odd graphed events

EPOCH_NS = 1_733_212_345_678_901_234


def outcome(fn, trace, *args, **kwargs):
    """(result, trace, stdout) of a call, or the type of the exception it raised."""
    try:
        r, out = call(fn, trace, *args, **kwargs)
    except Exception as e:
        return type(e)
    return r, trace, out


def same_outcome(ref, which, trace, *args, **kwargs):
    """cgfast does what the reference does: the same result, or the same kind of error."""
    ref_name, ours_name = FUNCS[which]
    want = outcome(getattr(ref, ref_name), copy.deepcopy(trace), *copy.deepcopy(args), **kwargs)
    got = outcome(getattr(cgfast, ours_name), copy.deepcopy(trace), *copy.deepcopy(args), **kwargs)
    if isinstance(want, type):
        assert got is want or (isinstance(got, type) and issubclass(got, want)), (
            f"reference raised {want.__name__}, cgfast gave {got!r}"
        )
    else:
        assert not isinstance(got, type), f"cgfast raised {got.__name__}, the reference gave {want!r}"
        assert repr(got) == repr(want)
    return got


def no_ts(e):
    del e["ts"]
    return e


ODD_GRAPHED = {
    "null dur": lambda: K(7, 10, node=5, dur=None) | {"dur": None},
    "string ts": lambda: K(7, "10", node=5),
    "null ts": lambda: K(7, None, node=5),
    "no ts": lambda: no_ts(K(7, 10, node=5)),
    "list ts": lambda: K(7, [10], node=5),
    "epoch ns ts": lambda: K(7, EPOCH_NS, node=5, dur=EPOCH_NS),
    "ts beyond 64 bits": lambda: K(7, 2**70, node=5),
}
ODD_IN_64_BITS = [name for name in ODD_GRAPHED if name != "ts beyond 64 bits"]


@pytest.mark.parametrize("odd", list(ODD_GRAPHED))
@pytest.mark.parametrize("which", ["annotate", "move", "fix"])
def test_odd_graphed_events_as_the_reference(ref, which, odd):
    event = ODD_GRAPHED[odd]()
    flow = F(7, event.get("ts"))
    if "ts" not in event:
        del flow["ts"]
    trace = T(TN(7), event, flow, K(7, 5, node=6, dur=10), F(7, 5), K(7, 30, node=7))
    args = ({5: [{"name": "x", "stream": 60}], 6: ["y"]},) if which == "annotate" else ()
    if odd == "ts beyond 64 bits" and which != "annotate":
        # the lane passes order times in 64 bits: they refuse, never guess
        with pytest.raises(OverflowError, match="beyond 64 bits"):
            getattr(cgfast, FUNCS[which][1])(trace)
        return
    got = same_outcome(ref, which, trace, *args)
    if which == "annotate" and odd != "list ts":
        assert got[0] == 2
        assert got[1]["traceEvents"][1]["tid"] == 60 and got[1]["traceEvents"][2]["tid"] == 60, (
            "the event and its flow move"
        )


def test_odd_duration_of_a_moved_kernel_is_never_added(ref):
    # the reference adds dur only to kernels that stay: a null dur on one that moves is fine
    trace = T(K(7, 0, node=1, dur=10), K(7, 5, node=2, dur=None) | {"dur": None}, K(7, 20, node=3))
    compare(ref, "move", trace)


@pytest.mark.parametrize("which", ["annotate", "move", "fix"])
def test_events_and_args_that_are_not_dicts(ref, which):
    args = ({},) if which == "annotate" else ()
    for trace in (
        T(K(7, 1, node=1), [1, 2]),
        T(K(7, 1, node=1), "event"),
        T(K(7, 1, node=1) | {"args": [1]}),
        T(K(7, 1, node=1) | {"args": None}),
    ):
        same_outcome(ref, which, trace, *args)
    # args the pass never reads are fine
    same_outcome(ref, which, T({"ph": "X", "cat": "cpu_op", "tid": 1, "ts": 1, "args": "x"}), *args)


epoch_times = st.one_of(
    st.integers(EPOCH_NS - 50, EPOCH_NS + 50),
    st.integers(EPOCH_NS - 50, EPOCH_NS + 50).map(float),
    st.integers(-(2**62), 2**62),
)


@st.composite
def epoch_traces(draw):
    events = []
    for _ in range(draw(st.integers(0, 12))):
        tid = draw(st.sampled_from([7, 8, 20]))
        ts = draw(epoch_times)
        if draw(st.integers(0, 3)) == 0:
            events.append(F(tid, ts))
            continue
        node = draw(st.sampled_from([1, 2, 3, 0]))
        events.append(
            K(tid, ts, node=node, dur=draw(st.one_of(st.integers(0, 40), st.integers(0, 40).map(float))))
        )
    return T(*events)


@SETTINGS
@given(trace=epoch_traces(), max_adjust_us=st.sampled_from([1.0, 0.0, 10.0]))
def test_hypothesis_epoch_nanosecond_times(ref, trace, max_adjust_us):
    chain(ref, trace, {1: [{"stream": 20}], 2: ["x"]}, max_adjust_us=max_adjust_us)


@SETTINGS
@given(
    trace=traces(),
    odd=st.lists(st.sampled_from(ODD_IN_64_BITS), min_size=1, max_size=3),
    at=st.integers(0, 30),
)
def test_hypothesis_odd_graphed_events(ref, trace, odd, at):
    events = trace["traceEvents"]
    for name in odd:
        events.insert(min(at, len(events)), ODD_GRAPHED[name]())
    same_outcome(ref, "annotate", trace, {5: [{"stream": 60}], 1: ["x"]})
    for which in ("move", "fix"):
        same_outcome(ref, which, trace)
