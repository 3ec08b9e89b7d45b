"""Spark's own per-batch timings, from a StreamingQueryListener."""

from __future__ import annotations

import json
import threading
from typing import Callable, Optional

from pyspark.sql.streaming import StreamingQueryListener

from ..service_model import HEAP_POOLS


def progress_record(progress) -> dict:
    """Flatten a StreamingQueryProgress into a metrics-friendly dict."""
    durations = dict(progress.durationMs or {})
    record = {
        "batch_id": int(progress.batchId),
        "timestamp": progress.timestamp,
        "numInputRows": int(progress.numInputRows),
        "inputRowsPerSecond": progress.inputRowsPerSecond,
        "processedRowsPerSecond": progress.processedRowsPerSecond,
    }
    for key, value in durations.items():
        record[f"{key}_ms"] = value
    operators = list(getattr(progress, "stateOperators", None) or [])
    if operators:  # the state the next batches work on (the feature service-time model reads it)
        record["state_rows"] = sum(int(op.numRowsTotal or 0) for op in operators)
        record["state_bytes"] = sum(int(op.memoryUsedBytes or 0) for op in operators)
        record["state_rows_removed"] = sum(int(op.numRowsRemoved or 0) for op in operators)
    return record


class JvmMemory:
    """The driver JVM's garbage collection and heap, from its management beans (py4j).

    :meth:`sample` after each batch's progress tells what the JVM spent collecting since the
    previous sample (``jvm_gc_ms``, ``jvm_gc_count``, of which ``jvm_full_gc_count`` collected the
    old generation too: every collector summed) and how full its heap is after it: the whole heap
    (``heap_used_bytes``, ``heap_committed_bytes``, ``heap_max_bytes``), the young generation's
    eden, where new objects go and whose filling starts a young collection (``eden_used_bytes``
    of ``eden_committed_bytes``), and the old generation, whose filling starts a full one
    (``old_used_bytes`` of ``old_committed_bytes``).  In local mode the driver runs the tasks too,
    so that is all of Spark's collection; on a cluster the executors' is in each stage's
    ``jvmGcTime`` (:mod:`.stages`).  The first sample is the baseline: it has no deltas.
    """

    def __init__(self, spark) -> None:
        factory = spark._jvm.java.lang.management.ManagementFactory
        self._memory = factory.getMemoryMXBean()
        # (bean, collects the old generation): serial MarkSweepCompact, parallel PS MarkSweep, G1 Old Generation
        self._collectors = [(b, "MarkSweep" in str(b.getName()) or "Old" in str(b.getName()))
                            for b in factory.getGarbageCollectorMXBeans()]
        self._pools: dict[str, object] = {}
        for pool in factory.getMemoryPoolMXBeans():  # "Eden Space", "PS Old Gen", "Tenured Gen", "G1 Eden Space"
            name = str(pool.getName())
            eden, old = HEAP_POOLS  # the names HeapForecast reads
            if "Eden" in name:
                self._pools[eden] = pool
            elif "Old Gen" in name or "Tenured" in name:
                self._pools[old] = pool
        self._last: Optional[tuple[int, int, int]] = None

    def sample(self) -> dict:
        gc_ms = gc_count = full = 0
        for bean, old in self._collectors:
            count = max(0, int(bean.getCollectionCount()))  # -1: this collector does not say
            gc_ms += max(0, int(bean.getCollectionTime()))
            gc_count += count
            full += count if old else 0
        heap = self._memory.getHeapMemoryUsage()
        out = {"heap_used_bytes": int(heap.getUsed()), "heap_committed_bytes": int(heap.getCommitted())}
        if int(heap.getMax()) > 0:  # -1: no limit set
            out["heap_max_bytes"] = int(heap.getMax())
        for kind, pool in self._pools.items():
            usage = pool.getUsage()
            out[f"{kind}_used_bytes"] = int(usage.getUsed())
            out[f"{kind}_committed_bytes"] = int(usage.getCommitted())
        if self._last is not None:
            out["jvm_gc_ms"] = gc_ms - self._last[0]
            out["jvm_gc_count"] = gc_count - self._last[1]
            out["jvm_full_gc_count"] = full - self._last[2]
        self._last = (gc_ms, gc_count, full)
        return out


def progress_dict(progress) -> dict:
    """The whole StreamingQueryProgress as Spark's JSON says it (an item of ``recentProgress`` too)."""
    return dict(progress) if isinstance(progress, dict) and not hasattr(progress, "json") else json.loads(progress.json)


class ProgressListener(StreamingQueryListener):
    """Forwards progress of one query (matched by id) to ``on_progress``, as ``convert`` makes it.

    Callbacks arrive on Spark's listener bus thread 0.1-0.4 s after each batch.
    """

    def __init__(self, on_progress: Callable[[dict], None],
                 convert: Callable[[object], dict] = progress_record) -> None:
        self.on_progress = on_progress
        self.convert = convert
        self.query_id: Optional[str] = None
        self.terminated = threading.Event()
        self.exception: Optional[str] = None

    def onQueryStarted(self, event) -> None:
        pass

    def onQueryProgress(self, event) -> None:
        progress = event.progress
        if self.query_id is not None and str(progress.id) != self.query_id:
            return
        try:
            self.on_progress(self.convert(progress))
        except Exception:  # never let a metrics hiccup kill Spark's listener bus
            pass

    def onQueryIdle(self, event) -> None:
        pass

    def onQueryTerminated(self, event) -> None:
        if self.query_id is not None and str(event.id) != self.query_id:
            return
        self.exception = event.exception
        self.terminated.set()
