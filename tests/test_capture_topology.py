"""The recorded graph topology on the fake driver."""

from __future__ import annotations

import logging

from cgfast import capture
from cgfast.capture._interface import NodeType
from fake_graph_driver import FakeCUDAGraph, capturing


def test_topology_lists_every_annotatable_node_with_collapsed_dependencies(fake):
    capture.enable_annotations()
    g = FakeCUDAGraph(fake)
    side = fake.new_stream()
    with capturing(g) as main:
        copy = fake.memcpy()
        with capture.mark_kernels("only this one is annotated"):
            norm = fake.launch("_Z4normPf", grid=(64, 1, 1), block=(256, 1, 1))
        fake.record_event(external=True)  # an event-record node between two kernels
        fake.add_node(NodeType.EMPTY)
        gemm = fake.launch("_Z4gemmPf", grid=(8, 8, 2), block=(128, 1, 1))
        fake.wait_stream(side, main)
        with fake.use(side):
            clear = fake.memset()
            side_kernel = fake.launch("side")
        fake.wait_stream(main, side)
        fake.add_node(NodeType.EMPTY)  # join node
        last = fake.launch("last")
    exec_id = g.graph_exec.id
    topology = capture.get_graph_topology()
    assert list(topology) == [exec_id]

    def key(node):
        return exec_id << 32 | node.local_id

    assert topology[exec_id] == [
        {"id": key(copy), "type": "memcpy", "name": None, "deps": [], "grid": None, "block": None},
        {
            "id": key(norm),
            "type": "kernel",
            "name": "_Z4normPf",
            "deps": [key(copy)],
            "grid": [64, 1, 1],
            "block": [256, 1, 1],
        },
        {
            "id": key(gemm),
            "type": "kernel",
            "name": "_Z4gemmPf",
            "deps": [key(norm)],
            "grid": [8, 8, 2],
            "block": [128, 1, 1],
        },
        {"id": key(clear), "type": "memset", "name": None, "deps": [key(gemm)], "grid": None, "block": None},
        {
            "id": key(side_kernel),
            "type": "kernel",
            "name": "side",
            "deps": [key(clear)],
            "grid": [1, 1, 1],
            "block": [128, 1, 1],
        },
        {
            "id": key(last),
            "type": "kernel",
            "name": "last",
            "deps": [key(gemm), key(side_kernel)],
            "grid": [1, 1, 1],
            "block": [128, 1, 1],
        },
    ]


def test_topology_of_a_graph_without_scopes_is_recorded_while_enabled(fake):
    capture.enable_annotations()
    g = FakeCUDAGraph(fake)
    with capturing(g):
        fake.launch("a")
        fake.launch("b")
    assert [n["name"] for n in capture.get_graph_topology()[g.graph_exec.id]] == ["a", "b"]
    assert dict(capture.get_kernel_annotations()) == {}


def test_no_topology_while_disabled(fake):
    g = FakeCUDAGraph(fake)
    with capturing(g):
        fake.launch("a")
    assert capture.get_graph_topology() == {}


def test_a_long_chain_of_other_nodes_collapses_without_recursion(fake):
    capture.enable_annotations()
    g = FakeCUDAGraph(fake)
    with capturing(g):
        first = fake.launch("first")
        for _ in range(5000):
            fake.add_node(NodeType.EMPTY)
        second = fake.launch("second")
    nodes = capture.get_graph_topology()[g.graph_exec.id]
    assert [n["deps"] for n in nodes] == [[], [g.graph_exec.id << 32 | first.local_id]]
    assert nodes[1]["id"] == g.graph_exec.id << 32 | second.local_id


def test_diamonds_of_other_nodes_are_collapsed_once_per_node(fake):
    capture.enable_annotations()
    g = FakeCUDAGraph(fake)
    streams = [fake.new_stream() for _ in range(3)]
    with capturing(g) as main:
        root = fake.launch("root")
        fake.add_node(NodeType.EMPTY)
        for stream in streams:
            fake.wait_stream(stream, main)
            with fake.use(stream):
                fake.add_node(NodeType.HOST)
        for stream in streams:
            fake.wait_stream(main, stream)
        fake.calls.clear()
        leaf = fake.launch("leaf")
    nodes = {n["name"]: n for n in capture.get_graph_topology()[g.graph_exec.id]}
    assert nodes["leaf"]["deps"] == [g.graph_exec.id << 32 | root.local_id]
    assert leaf.local_id == 5
    # each node's dependencies are asked for once: 2 kernels, 3 host nodes, 1 empty
    assert fake.calls["dependencies"] == 6


def test_child_graph_bodies_are_in_the_topology_after_the_graphs_own_nodes(fake):
    capture.enable_annotations()
    g = FakeCUDAGraph(fake)
    with capturing(g):
        before = fake.launch("before")
        child = fake.child_graph(["inside", "inside 2"])
        child.body.nodes[1].deps.append(child.body.nodes[0])  # a chain in the body
        child.body.nodes[0].dependents.append(child.body.nodes[1])
        after = fake.launch("after")
    high = g.graph_exec.id << 32
    local = fake.exec_local_ids(g.template or child.graph)
    inside, inside_2 = child.body.nodes
    assert (local[inside], local[inside_2]) == (3, 4)  # after the graph's 3 nodes
    nodes = {n["name"]: n for n in capture.get_graph_topology()[g.graph_exec.id]}
    assert [n["id"] for n in nodes.values()] == [high | 0, high | 2, high | 3, high | 4]
    assert nodes["inside"]["deps"] == [high | before.local_id]  # a body root follows its child node
    assert nodes["inside 2"]["deps"] == [high | 3]
    assert nodes["after"]["deps"] == [high | 4]  # what follows the child node follows its body
    assert nodes["after"]["id"] == high | after.local_id


def test_topology_failure_is_logged_and_the_capture_still_completes(fake, caplog):
    capture.enable_annotations()
    g = FakeCUDAGraph(fake)
    with caplog.at_level(logging.WARNING, logger="cgfast.capture"), capturing(g):
        with capture.mark_kernels("still annotated"):
            k = fake.launch("k")
        fake.failing.add("kernel_launch")
    assert g.graph_exec is not None
    assert capture.get_graph_topology() == {}
    assert list(capture.get_kernel_annotations()) == [g.graph_exec.id << 32 | k.local_id]
    assert any("topology" in r.getMessage() for r in caplog.records)


def test_topology_returns_a_new_dict_each_call(fake):
    capture.enable_annotations()
    g = FakeCUDAGraph(fake)
    with capturing(g):
        fake.launch("a")
    first = capture.get_graph_topology()
    first[g.graph_exec.id].clear()
    assert len(capture.get_graph_topology()[g.graph_exec.id]) == 1
