"""Python wrapper codegen that brackets every kernel launch with ``mark_kernels``.

With ``triton.cudagraph_kernel_annotations`` on, each launch line is written as::

    _annotation_ctx = _mark_kernels({'name': 'relu', 'module': 'layers.0'})
    _annotation_ctx.__enter__()
    <the launch line(s)>
    _annotation_ctx.__exit__(None, None, None)

Generated kernels (Triton, C++, templates) go through ``generate_kernel_call``;
extern and fallback kernels through the ``generate_*`` entry points named in
``EXTERN_ENTRY_POINTS``, which receive their IR node, and the two in
``CURRENT_NODE_ENTRY_POINTS``, which do not and take the scheduler's current node.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Callable, Optional

from torch._inductor import config
from torch._inductor.codegen.wrapper import (
    PythonWrapperCodegen,
    SubgraphPythonWrapperCodegen,
)
from torch._inductor.virtualized import V

from cgfast.inductor._annotations import Annotation, origins_of

log = logging.getLogger(__name__)

_WRAPPED_MARK = "_cgfast_brackets_launches"

IMPORT_LINE = "from cgfast.capture import mark_kernels as _mark_kernels"
COUNTS_IMPORT_LINE = "from cgfast.capture import count_kernels as _count_kernels"

EXTERN_ENTRY_POINTS = (
    "generate_extern_kernel_out",
    "generate_extern_kernel_alloc",
    "generate_fallback_kernel",
    "generate_scatter_fallback",
    "generate_index_put_fallback",
)
# Only in some torch versions; bracketed where the base class has it.
OPTIONAL_EXTERN_ENTRY_POINTS = ("generate_extern_kernel_multi_out",)
CURRENT_NODE_ENTRY_POINTS = (
    "generate_fallback_kernel_with_runtime_lookup",
    "codegen_device_copy",
)


def annotations_enabled() -> bool:
    # registered at runtime by cgfast.inductor._config.register_entries
    return bool(config.triton.cudagraph_kernel_annotations)  # type: ignore[attr-defined]


def estimates_enabled() -> bool:
    # registered at runtime by cgfast.inductor._config.register_entries
    return bool(config.triton.cudagraph_kernel_flops)  # type: ignore[attr-defined]


def estimates_of(scheduler_node: Any) -> Optional[tuple[int, int]]:
    """Inductor's estimates for the kernel of ``scheduler_node``: its FLOPs (of matmul
    and convolution templates and extern kernels; 0 for the others) and the bytes of the
    buffers it reads and writes. ``None`` where they are not plain integers (dynamic
    shapes) or this Inductor has no estimates."""
    estimate_flops = getattr(scheduler_node, "estimate_flops", None)
    buffer_sizes = getattr(scheduler_node, "get_read_write_buffers_sizes", None)
    if estimate_flops is None or buffer_sizes is None:
        return None
    flops, nbytes = estimate_flops() or 0, buffer_sizes()
    try:
        return int(flops), int(nbytes)
    except TypeError:  # a symbolic size
        return None


def _current_scheduler_node() -> Any:
    scheduler = getattr(V.graph, "scheduler", None)
    return None if scheduler is None else scheduler.current_node


def _scheduled_operations(cpu_batch: bool) -> list[Any]:
    """IR operations of the kernel being launched. The C++ backend batches nodes and
    launches at flush, when its kernel group holds them and the scheduler's current
    node is already a later one."""
    scheduler = getattr(V.graph, "scheduler", None)
    if scheduler is None:
        return []
    if cpu_batch:
        for backend in scheduler.backends.values():
            group = getattr(backend, "kernel_group", None)
            batched = getattr(group, "scheduled_nodes", None)
            if batched:
                return [n.node for n in batched if n.node is not None]
    current = scheduler.current_node
    if current is None:
        return []
    return [n.node for n in current.get_nodes() if n.node is not None]


def _current_extern() -> Any:
    """The IR node of the extern kernel the scheduler is generating."""
    current = V.graph.scheduler.current_node
    if current is None:
        raise RuntimeError("the scheduler is generating no node")
    return current.node


class _LaunchBrackets:
    """Mixin for ``PythonWrapperCodegen`` and its subgraph variant."""

    _bracket_open = False

    if TYPE_CHECKING:  # provided by the wrapper class this is mixed into

        def writeline(self, line: Any) -> None: ...

    @contextlib.contextmanager
    def _bracket(
        self, annotation: Callable[[], Annotation], fallback_name: str, scheduler_node: Any = None
    ) -> Iterator[None]:
        """``scheduler_node``: the scheduler node whose kernel is launched, for its
        estimates (``None``: not known)."""
        # A launch nested in another (a fallback emitting a kernel call) shares its bracket.
        if self._bracket_open or not annotations_enabled():
            yield
            return
        try:
            label = annotation()
        except Exception:  # a label is not worth failing the user's compile over
            log.warning("cgfast.inductor: could not label %s", fallback_name, exc_info=True)
            label = {"name": fallback_name}
        counts = None
        if scheduler_node is not None and estimates_enabled():
            try:
                counts = estimates_of(scheduler_node)
            except Exception:  # nor are the estimates
                log.warning("cgfast.inductor: could not estimate %s", fallback_name, exc_info=True)
        self._root_wrapper().add_import_once(IMPORT_LINE)
        self.writeline(f"_annotation_ctx = _mark_kernels({label!r})")
        self.writeline("_annotation_ctx.__enter__()")
        if counts is not None:
            self._root_wrapper().add_import_once(COUNTS_IMPORT_LINE)
            self.writeline(f"_counts_ctx = _count_kernels({counts[0]}, {counts[1]})")
            self.writeline("_counts_ctx.__enter__()")
        self._bracket_open = True
        try:
            yield
        finally:
            self._bracket_open = False
        if counts is not None:
            self.writeline("_counts_ctx.__exit__(None, None, None)")
        self.writeline("_annotation_ctx.__exit__(None, None, None)")

    def _root_wrapper(self) -> Any:
        wrapper: Any = self
        while isinstance(wrapper, SubgraphPythonWrapperCodegen):
            wrapper = wrapper.parent_wrapper
        return wrapper

    def generate_kernel_call(self, kernel_name: str, *args: Any, **kwargs: Any) -> Any:
        cpu_batch = not kwargs.get("triton", True)

        def annotation() -> Annotation:
            operations = _scheduled_operations(cpu_batch)
            return origins_of(V.graph).kernel(operations, kernel_name)

        # a C++ kernel group launches at flush, when the scheduler is at a later node
        with self._bracket(annotation, kernel_name, None if cpu_batch else _current_scheduler_node()):
            # the wrapper class this is mixed into has it (mypy checks the mixin alone)
            return super().generate_kernel_call(kernel_name, *args, **kwargs)  # type: ignore[misc]


def _bracketing_extern(name: str) -> Callable[..., Any]:
    def bracketed(self: Any, node: Any, *args: Any, **kwargs: Any) -> Any:
        fallback_name = str(getattr(node, "python_kernel_name", None) or name)
        scheduler_node = _current_scheduler_node()
        if scheduler_node is not None and scheduler_node.node is not node:
            scheduler_node = None  # an extern the scheduler is not generating (inside another)
        with self._bracket(lambda: origins_of(V.graph).extern(node), fallback_name, scheduler_node):
            return getattr(super(_LaunchBrackets, self), name)(node, *args, **kwargs)

    bracketed.__name__ = bracketed.__qualname__ = name
    return bracketed


def _bracketing_current_extern(name: str) -> Callable[..., Any]:
    def bracketed(self: Any, *args: Any, **kwargs: Any) -> Any:
        with self._bracket(
            lambda: origins_of(V.graph).extern(_current_extern()), name, _current_scheduler_node()
        ):
            return getattr(super(_LaunchBrackets, self), name)(*args, **kwargs)

    bracketed.__name__ = bracketed.__qualname__ = name
    return bracketed


for _name in EXTERN_ENTRY_POINTS + OPTIONAL_EXTERN_ENTRY_POINTS:
    if hasattr(PythonWrapperCodegen, _name):
        setattr(_LaunchBrackets, _name, _bracketing_extern(_name))
for _name in CURRENT_NODE_ENTRY_POINTS:
    setattr(_LaunchBrackets, _name, _bracketing_current_extern(_name))


# Extern kernels whose codegen writes its launch line itself, through no ``generate_*``
# entry point: bracketed around the scheduler's call of that codegen.
SELF_WRITING_EXTERNS = ("InplaceBernoulliFallback",)


def _bracketing_extern_call(original: Callable[..., Any]) -> Callable[..., Any]:
    from torch._inductor import ir

    kinds = tuple(k for k in (getattr(ir, name, None) for name in SELF_WRITING_EXTERNS) if k is not None)

    @functools.wraps(original)
    def codegen_extern_call(self: Any, scheduler_node: Any) -> Any:
        node, wrapper = scheduler_node.node, V.graph.wrapper_code
        if not isinstance(node, kinds) or not isinstance(wrapper, _LaunchBrackets):
            return original(self, scheduler_node)
        name = str(getattr(node, "python_kernel_name", None) or type(node).__name__)
        with wrapper._bracket(lambda: origins_of(V.graph).extern(node), name, scheduler_node):
            return original(self, scheduler_node)

    setattr(codegen_extern_call, _WRAPPED_MARK, True)
    return codegen_extern_call


def install_scheduler_hook() -> None:
    from torch._inductor.scheduler import Scheduler

    if not getattr(Scheduler.codegen_extern_call, _WRAPPED_MARK, False):
        # patched on torch's class: the scheduler calls it for extern kernels that write
        # their launch line themselves
        Scheduler.codegen_extern_call = _bracketing_extern_call(  # type: ignore[method-assign]
            Scheduler.codegen_extern_call
        )


class AnnotatingPythonWrapperCodegen(_LaunchBrackets, PythonWrapperCodegen):
    """The Python wrapper with launch brackets."""

    @staticmethod
    def create(
        is_subgraph: bool,
        subgraph_name: Optional[str],
        parent_wrapper: Optional[PythonWrapperCodegen],
        partition_signatures: Any = None,
    ) -> PythonWrapperCodegen:
        # torch's create() names both classes itself; graph partitions, which hold all
        # cudagraphed code by default, are subgraph wrappers.
        if is_subgraph:
            if subgraph_name is None or parent_wrapper is None:
                raise AssertionError("a subgraph wrapper needs a name and a parent")
            return AnnotatingSubgraphPythonWrapperCodegen(subgraph_name, parent_wrapper, partition_signatures)
        return AnnotatingPythonWrapperCodegen()


class AnnotatingSubgraphPythonWrapperCodegen(_LaunchBrackets, SubgraphPythonWrapperCodegen):
    """The subgraph (and graph partition) wrapper with launch brackets."""
