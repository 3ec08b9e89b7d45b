"""Which GPU path a stream uses, and the per-query-shape cache of operator DAGs (pure Python).

A stream places the operators of every micro-batch with the
:class:`~lmstream_kit.mapper.DeviceMapper`; *how* the plan is carried out is the
stream's **device mode**:

``rapids``
    The RAPIDS Accelerator is loaded in Spark.  The plan becomes
    ``spark.rapids.sql.enabled`` / ``spark.rapids.sql.exec.<Exec>`` confs on the
    session the streaming query runs on (:mod:`lmstream_kit.rapids`).  Spark
    plans a micro-batch right after the source hands it its end offset, so the
    confs are set when the batch is admitted (the admitted bytes are known then),
    and the plan of batch *N* is in force for batch *N*.
``twin``
    The workload's per-batch query runs in the driver on the twin executor
    (:mod:`lmstream_kit.twin`): the GPU-side operators on cudf, the CPU-side ones
    on pandas.  Spark still runs the stream (offsets, checkpoints, admission)
    with a pass-through query.  Without a working cudf the twin runs on pandas
    alone (``gpu_backend="pandas"``), which is what CI checks against Spark.
``advisory``
    No GPU path: the plan is computed, recorded and shown, and Spark runs
    everything on the CPU.  Results never depend on the plan.

``auto`` picks ``rapids`` when the plugin is loaded, else ``twin`` on cudf when
cudf works and the workload has a twin, else ``advisory``.

>>> resolve_device_mode("auto", rapids_loaded=False, twin_available=True, cudf_ok=False,
...                     cudf_reason="no GPU").mode
'advisory'
>>> resolve_device_mode("twin", rapids_loaded=False, twin_available=True, cudf_ok=False,
...                     cudf_reason="no GPU").gpu_backend
'pandas'
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable, Hashable, Optional

from .exceptions import ConfigError
from .mapper import PlanDag

DEVICE_MODES = ("auto", "advisory", "rapids", "twin")


@dataclass(frozen=True)
class DeviceMode:
    """The resolved device mode of a stream and why it was chosen."""

    mode: str  # advisory | rapids | twin
    gpu_backend: Optional[str]  # twin: "cudf" or "pandas"; None otherwise
    reason: str

    def to_dict(self) -> dict:
        return {"device_mode": self.mode, "gpu_backend": self.gpu_backend, "device_mode_reason": self.reason}


def check_device_mode(requested: str) -> str:
    """Validate a requested mode name (before anything starts)."""
    if requested not in DEVICE_MODES:
        raise ConfigError(f"device mode must be one of {', '.join(DEVICE_MODES)}, got {requested!r}")
    return requested


def resolve_device_mode(
    requested: str,
    *,
    rapids_loaded: bool,
    twin_available: bool,
    cudf_ok: bool,
    cudf_reason: str = "",
    workload: str = "",
) -> DeviceMode:
    """Turn the requested mode into the one that runs.

    Raises
    ------
    ConfigError
        ``rapids`` without the plugin, or ``twin`` for a workload without a twin.
    """
    check_device_mode(requested)
    if requested == "rapids":
        if not rapids_loaded:
            raise ConfigError(
                "device mode 'rapids' needs the RAPIDS Accelerator loaded in Spark "
                "(spark.plugins=com.nvidia.spark.SQLPlugin and its jar); see docs/gpu-cluster.md"
            )
        return DeviceMode("rapids", None, "RAPIDS plugin loaded")
    if requested == "twin":
        if not twin_available:
            raise ConfigError(f"device mode 'twin': workload {workload or '?'} has no twin executor")
        if cudf_ok:
            return DeviceMode("twin", "cudf", "cudf works: GPU-side operators run on cudf")
        return DeviceMode("twin", "pandas", f"cudf unavailable ({cudf_reason}): the twin runs on pandas")
    if requested == "auto":
        if rapids_loaded:
            return DeviceMode("rapids", None, "auto: RAPIDS plugin loaded")
        if twin_available and cudf_ok:
            return DeviceMode("twin", "cudf", "auto: no RAPIDS plugin, cudf works")
        why = [] if twin_available else [f"no twin for {workload or 'this workload'}"]
        if not cudf_ok:
            why.append(f"cudf unavailable ({cudf_reason})" if cudf_reason else "cudf unavailable")
        return DeviceMode("advisory", None, "auto: no RAPIDS plugin; " + "; ".join(why))
    return DeviceMode("advisory", None, "advisory requested")


def device_mode_for(requested: str, workload: str, *, rapids_loaded: Callable[[], bool]) -> DeviceMode:
    """The device mode a stream of ``workload`` runs in: asks the engine and cudf only when it matters.

    >>> device_mode_for("advisory", "LR2S", rapids_loaded=lambda: 1 / 0).mode
    'advisory'
    """
    loaded = requested in ("auto", "rapids") and rapids_loaded()
    twin_available, cudf_ok, cudf_reason = False, False, ""
    if requested in ("auto", "twin"):
        from .twin import twin_program

        twin_available = twin_program(workload) is not None
        if twin_available:
            from .twin.backends import cudf_available

            cudf_ok, cudf_reason = cudf_available()
    return resolve_device_mode(requested, rapids_loaded=loaded, twin_available=twin_available,
                               cudf_ok=cudf_ok, cudf_reason=cudf_reason, workload=workload)


class PlanCache:
    """Operator DAGs per query shape, so that planning does not cost Spark work per batch.

    ``get(key, build)`` returns ``(dag, hit, seconds)``: ``build()`` runs only on
    a miss and ``seconds`` is the time it took (0 on a hit).  ``enabled=False``
    builds every time (the benchmark's "without cache" arm).

    >>> cache = PlanCache()
    >>> from lmstream_kit.mapper import Operator
    >>> build = lambda: PlanDag((Operator(0, "FilterExec"),))
    >>> [cache.get("q", build)[1] for _ in range(3)], cache.stats()
    ([False, True, True], {'hits': 2, 'misses': 1, 'shapes': 1, 'build_s': ...})
    """

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = bool(enabled)
        self._dags: dict[Hashable, PlanDag] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.build_s = 0.0

    def peek(self, key: Hashable) -> Optional[PlanDag]:
        """The cached DAG of ``key`` or None (no build, no statistics)."""
        with self._lock:
            return self._dags.get(key) if self.enabled else None

    def get(self, key: Hashable, build: Callable[[], PlanDag]) -> tuple[PlanDag, bool, float]:
        with self._lock:
            dag = self._dags.get(key) if self.enabled else None
            if dag is not None:
                self.hits += 1
                return dag, True, 0.0
        t0 = time.perf_counter()
        dag = build()
        seconds = time.perf_counter() - t0
        with self._lock:
            self.misses += 1
            self.build_s += seconds
            if self.enabled:
                self._dags[key] = dag
        return dag, False, seconds

    def clear(self) -> None:
        """Forget every shape (the next batch of each shape is planned again)."""
        with self._lock:
            self._dags.clear()

    def stats(self) -> dict:
        with self._lock:
            return {"hits": self.hits, "misses": self.misses, "shapes": len(self._dags),
                    "build_s": self.build_s}
