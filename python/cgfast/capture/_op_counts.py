"""FLOPs and bytes of each op, on the graph nodes the op created.

While something asks for counts (``annotate_modules(..., flops=True)``,
``recording(flops=True)``) and a capture through ``torch.cuda.CUDAGraph`` is under way,
a dispatch mode sees every aten op the capturing thread runs (and the autograd threads
it starts), as the launch-stack mode does. The nodes the op added to the capture (a span
of local ids) get its counts:

* FLOPs by the formula ``torch.utils.flop_counter`` registers for the op (0 without
  one), and an op without a formula that decomposes is counted as the ops it decomposes
  into, each on its own nodes, as ``FlopCounterMode`` counts it; so a module's FLOPs sum
  to what ``FlopCounterMode`` gives it for the same run.
* bytes as the ``nbytes`` of every tensor among the op's arguments and results, each
  time it appears: a view counts its own elements (not its storage, nor the expanded
  elements' sharing), and an in-place or ``out=`` tensor is counted as read and again as
  written.

The whole count goes on the first of the op's nodes (in local-id order), 0 on the
others: see ``Recorder.add_op_counts``.
"""

from __future__ import annotations

import functools
from typing import Any, Literal

from cgfast.capture._core import Span
from cgfast.capture._runtime import never_raises, runtime
from cgfast.capture._spans import begin_span

_begin_op = never_raises("reading the capture graph at an op")(begin_span)


@never_raises("reading the capture graph after an op")
def _node_count_after_op(backend: Any, graph: int) -> int:
    return backend.graphs.node_count(graph)


@functools.cache
def _tensor_type() -> Any:
    import torch

    return torch.Tensor


def tensor_bytes(value: Any) -> int:
    """The ``nbytes`` of every tensor in ``value`` (nested in lists, tuples and dicts)."""
    tensor = _tensor_type()
    if isinstance(value, tensor):
        return value.nbytes
    total = 0
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, tensor):
            total += item.nbytes
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
    return total


class _NotPlain(Exception):
    """A value the quick shape conversion leaves to ``torch.utils._pytree``."""


@functools.cache
def _shape_formulas() -> tuple:
    """The code of ``torch.utils.flop_counter``'s shape wrapper (the formulas registered
    to take shapes), and the leaf types ``_shapes`` passes through as they are."""
    import torch
    from torch.utils import flop_counter

    wrapper = getattr(flop_counter, "shape_wrapper", None)
    code = getattr(wrapper(lambda: None), "__code__", None) if wrapper is not None else None
    leaves = (
        int,
        float,
        bool,
        complex,
        str,
        type(None),
        torch.dtype,
        torch.device,
        torch.layout,
        torch.memory_format,
    )
    return code, leaves, torch.Size


def _shapes(value: Any, leaves: tuple, size: type) -> Any:
    """``value`` as the shape wrapper's ``tree_map(get_shape, ...)`` makes it, for plain
    values (tensors, exact lists, tuples and dicts of them and of leaves); ``_NotPlain``
    for anything else."""
    kind = type(value)
    if kind in leaves:
        return value
    if isinstance(value, _tensor_type()):
        return value.shape
    if kind is list:
        return [_shapes(item, leaves, size) for item in value]
    if kind is tuple:
        return tuple(_shapes(item, leaves, size) for item in value)
    if kind is size:  # pytree flattens a torch.Size and rebuilds it as a tuple
        return tuple(value)
    if kind is dict:
        return {key: _shapes(item, leaves, size) for key, item in value.items()}
    raise _NotPlain


def formula_flops(formula: Any, args: tuple, kwargs: dict, out: Any) -> Any:
    """``formula(*args, **kwargs, out_val=out)`` of a FLOP formula from
    ``flop_counter.flop_registry``; one that takes shapes gets them without the pytree
    round trip its wrapper makes (the same shapes, a fraction of the time)."""
    code, leaves, size = _shape_formulas()
    inner = getattr(formula, "__wrapped__", None)
    if code is None or inner is None or getattr(formula, "__code__", None) is not code:
        return formula(*args, **kwargs, out_val=out)
    try:
        shape_args = _shapes(args, leaves, size)
        shape_kwargs = _shapes(kwargs, leaves, size)
        out_shape = _shapes(out, leaves, size)
    except _NotPlain:
        return formula(*args, **kwargs, out_val=out)
    return inner(*shape_args, out_shape=out_shape, **shape_kwargs)


@never_raises("counting an op's FLOPs and bytes", default=(0, 0))
def _counts(func: Any, args: tuple, kwargs: dict, out: Any) -> tuple:
    from torch.utils.flop_counter import flop_registry

    formula = flop_registry.get(func._overloadpacket)
    flops = formula_flops(formula, args, kwargs, out) if formula is not None else 0
    return int(flops), tensor_bytes((args, kwargs, out))


@functools.cache
def op_counts_mode() -> type:
    """The dispatch mode that records op counts (a class made once: it subclasses
    torch's ``TorchDispatchMode``)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import flop_registry

    device_op = torch.ops.prim.device.default
    aten_op = torch._ops.OpOverload
    composite = torch._C.DispatchKey.CompositeImplicitAutograd
    has_kernel = torch._C._dispatch_has_kernel_for_dispatch_key

    class OpCounts(TorchDispatchMode):
        # Higher-order ops (torch.cond, ...) come through too, rather than failing for want
        # of a rule; they run uncounted: their bodies become conditional nodes, whose
        # nodes are never annotated (see docs/limits.md).
        supports_higher_order_operators = True

        def __init__(self) -> None:
            super().__init__()
            # op -> whether it is counted as what it decomposes into, asked once a push
            self.decomposes: dict = {}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if not isinstance(func, aten_op):
                return func(*args, **kwargs)
            decomposes = self.decomposes.get(func)
            if decomposes is None:
                decomposes = self.decomposes[func] = (
                    func._overloadpacket not in flop_registry
                    and func is not device_op
                    and (composite in func.py_kernels or has_kernel(func.name(), composite))
                )
            if decomposes:
                # FlopCounterMode counts what an op without a formula decomposes into
                # (the check first: most ops have no decomposition, and entering the
                # mode costs)
                with self:
                    out = func.decompose(*args, **kwargs)
                if out is not NotImplemented:
                    return out
            backend = runtime.backend() if runtime.enabled else None
            start = _begin_op(backend) if backend is not None else None
            out = func(*args, **kwargs)
            if start is not None:
                end = _node_count_after_op(backend, start.graph)
                if end is not None and end > start.first:
                    flops, nbytes = _counts(func, args, kwargs, out)
                    runtime.recorder.add_op_counts(Span(start.graph_id, start.first, end), flops, nbytes)
            return out

    return OpCounts


class count_kernels:
    """Record ``flops`` and ``nbytes`` for the kernel, memcpy and memset nodes the
    current stream's capture adds inside the scope, as one op's counts (whole on the
    first node, 0 on the others). The Inductor toggle brackets each kernel it emits with
    one, holding Inductor's own estimates. Outside a capture, while annotations are
    disabled, or without a backend it does nothing; where an op inside also counts the
    same nodes (``flops=True``), the op's counts win."""

    __slots__ = ("_backend", "_flops", "_nbytes", "_start")

    def __init__(self, flops: int, nbytes: int) -> None:
        self._flops = flops
        self._nbytes = nbytes
        self._backend: Any = None
        self._start: Any = None

    def __enter__(self) -> count_kernels:
        if not runtime.enabled or runtime.no_capture_in_progress():
            return self
        backend = runtime.backend()
        if backend is not None:
            self._start = _begin_op(backend)
            self._backend = backend
        return self

    def __exit__(self, exc_type: Any, exc: Any, traceback: Any) -> Literal[False]:
        start, backend = self._start, self._backend
        self._start = self._backend = None
        if start is None or exc_type is not None:
            return False
        end = _node_count_after_op(backend, start.graph)
        if end is not None and end > start.first:
            runtime.recorder.add_op_counts(Span(start.graph_id, start.first, end), self._flops, self._nbytes)
        return False
