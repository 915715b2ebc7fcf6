"""CUPTI's own kernel activity records (``graphNodeId``, ``graphId``) through ctypes, for
GPU tests and probes that need what CUPTI reports for graph kernels independently of
torch.profiler (torch <= 2.12 writes no ``graph node id``). Use it in a process of its
own: CUPTI takes one set of activity callbacks per process, and torch.profiler's would
replace these (or these torch.profiler's)."""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Iterator

CONCURRENT_KERNEL = 10


class KernelRecord(ctypes.Structure):
    """The leading fields of ``CUpti_ActivityKernel`` 9..11 (packed; the same offsets in
    each version, up to ``graphId``)."""

    _pack_ = 1
    _fields_ = [
        ("kind", ctypes.c_uint32),
        ("cacheConfig", ctypes.c_uint8),
        ("sharedMemoryConfig", ctypes.c_uint8),
        ("registersPerThread", ctypes.c_uint16),
        ("partitionedRequested", ctypes.c_int32),
        ("partitionedExecuted", ctypes.c_int32),
        ("start", ctypes.c_uint64),
        ("end", ctypes.c_uint64),
        ("completed", ctypes.c_uint64),
        ("deviceId", ctypes.c_uint32),
        ("contextId", ctypes.c_uint32),
        ("streamId", ctypes.c_uint32),
        ("dims", ctypes.c_int32 * 6),
        ("staticSharedMemory", ctypes.c_int32),
        ("dynamicSharedMemory", ctypes.c_int32),
        ("localMemoryPerThread", ctypes.c_uint32),
        ("localMemoryTotal", ctypes.c_uint32),
        ("correlationId", ctypes.c_uint32),
        ("gridId", ctypes.c_int64),
        ("name", ctypes.c_char_p),
        ("reserved0", ctypes.c_void_p),
        ("queued", ctypes.c_uint64),
        ("submitted", ctypes.c_uint64),
        ("launchType", ctypes.c_uint8),
        ("carveoutRequested", ctypes.c_uint8),
        ("carveout", ctypes.c_uint8),
        ("padding", ctypes.c_uint8),
        ("sharedMemoryExecuted", ctypes.c_uint32),
        ("graphNodeId", ctypes.c_uint64),
        ("shmemLimitConfig", ctypes.c_int32),
        ("graphId", ctypes.c_uint32),
    ]


def load_libcupti() -> ctypes.CDLL:
    from cgfast.capture._id_sources import libcupti_candidates

    for path in libcupti_candidates(13):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        if hasattr(lib, "cuptiActivityRegisterCallbacks"):
            return lib
    raise OSError("no libcupti with the activity API")


@contextlib.contextmanager
def kernel_records() -> Iterator[list[dict]]:
    """Collect every kernel activity record while the block runs; the list is filled
    when the block ends (after a flush), in start order."""
    lib = load_libcupti()
    buffers: dict = {}
    records: list[dict] = []
    request_type = ctypes.CFUNCTYPE(
        None,
        ctypes.POINTER(ctypes.c_void_p),
        ctypes.POINTER(ctypes.c_size_t),
        ctypes.POINTER(ctypes.c_size_t),
    )
    complete_type = ctypes.CFUNCTYPE(
        None, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t
    )
    lib.cuptiActivityGetNextRecord.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.POINTER(ctypes.c_void_p),
    ]

    @request_type
    def requested(buffer, size, max_records):
        block = ctypes.create_string_buffer(1 << 20)
        buffers[ctypes.addressof(block)] = block
        buffer[0] = ctypes.addressof(block)
        size[0] = 1 << 20
        max_records[0] = 0

    @complete_type
    def completed(context, stream_id, buffer, size, valid):
        record = ctypes.c_void_p()
        while lib.cuptiActivityGetNextRecord(buffer, valid, ctypes.byref(record)) == 0:
            kernel = KernelRecord.from_address(record.value)
            if kernel.kind == CONCURRENT_KERNEL:
                records.append(
                    {
                        "name": kernel.name.decode(errors="replace") if kernel.name else "",
                        "graphNodeId": kernel.graphNodeId,
                        "graphId": kernel.graphId,
                        "correlationId": kernel.correlationId,
                        "start": kernel.start,
                    }
                )
        buffers.pop(buffer, None)

    for call, code in (
        ("cuptiActivityRegisterCallbacks", lib.cuptiActivityRegisterCallbacks(requested, completed)),
        ("cuptiActivityEnable", lib.cuptiActivityEnable(CONCURRENT_KERNEL)),
    ):
        if code:
            raise RuntimeError(f"{call} failed: {code}")
    collected: list[dict] = []
    try:
        yield collected
    finally:
        lib.cuptiActivityFlushAll(1)
        lib.cuptiActivityDisable(CONCURRENT_KERNEL)
        collected.extend(sorted(records, key=lambda record: record["start"]))
