"""Operation-level CPU/GPU device mapping (LMStream Algorithm 2, ``MapDevice``), pure Python.

The mapper walks an operator DAG from its leaves to its root and puts every operator on the CPU or
the GPU from the data size of one partition of the micro-batch (paper Section III-D).  The paper's
Equations 7-9 were lost in the text we work from; the cost model below is a reconstruction that
keeps the properties the paper states, and each of them is checked in ``tests/test_mapper.py``.

Cost model
----------
With ``s`` the bytes of one data partition, ``I`` the inflection point and ``r = s / I``, an operator
of Table II class ``c`` with base cost ``b_c`` costs::

    (7)  C_cpu(r) = b_c * r                       CPU work grows linearly with the partition
    (8)  C_gpu(r) = b_c * m_c * r ** 0.5          the GPU amortises its fixed launch / occupancy cost
    (9)  T(r)     = t0 * r * min(1, r) ** 0.5     data transition (PCIe) cost, t0 = base transition cost

where the preference margin ``m_c`` comes from the class's initial preference (Table II):
``m_c = 1.1`` for CPU-preferring classes, ``1.0`` for neutral ones and ``0.9`` for GPU-preferring
ones.  So at ``r = 1`` (partition = inflection point) and before transition costs, the cheaper
device is the initial preference (neutral classes tie), and ``C_gpu / C_cpu = m_c / sqrt(r)``
falls strictly as the partition grows: below ``r = m_c ** 2`` the CPU is cheaper, above it the GPU.

``T`` is ``t0 * r ** 1.5`` below the inflection point, a negligible share ``(t0 / b_c) * sqrt(r)`` of
the work for small partitions (about 1 % at ``r = 0.01``; Fig. 2: under 1 % for small data), and
``t0 * r`` above it: the share rises to the full ``t0 / b_c`` at the inflection point and stays there.
It deliberately grows no faster than linearly: a super-linear surge such as ``t0 * r ** 2`` would
overtake the CPU/GPU gap (linear in ``r``) and send leaves and root back to the CPU for large
partitions, contradicting the paper's "if the data size increases, all operations must select the GPU".

Transition costs are added as in Algorithm 2, and they add up::

    gpu_total = C_gpu + T * ([leaf] + [root] + [previous device is CPU])
    cpu_total = C_cpu + T * [previous device is GPU]

Leaves read from the host and the root writes back to it, so both pay ``T`` on the GPU side.  The
*previous device* of an operator with several children is the GPU when any child is on the GPU:
all operators start on the GPU and the data flow leaves it only when every input has left it.
Leaves have no previous device.  An operator goes to the CPU when ``cpu_total < gpu_total``, to the
GPU when ``gpu_total < cpu_total``; an exact tie keeps the previous device (the GPU for leaves).

Monotonicity
------------
As ``r`` grows no operator moves from the GPU back to the CPU.  With ``k`` the number of ``T`` terms
on the GPU side minus those on the CPU side (``-1 <= k <= 2``), the sign of the decision is the sign
of ``(gpu_total - cpu_total) / (b_c r) = m_c / sqrt(r) + k (t0 / b_c) min(1, r) ** 0.5 - 1``.  This
is strictly decreasing in ``r`` when ``k <= 0``, and when ``k > 0`` as long as
``2 * t0 <= min_c(b_c * m_c)`` (0.72 with the Table II defaults, so ``t0 <= 0.36``); a child moving
to the GPU only lowers ``k`` by 2.  By induction from the leaves the mapping is monotone.  For
large partitions every classified operator ends on the GPU when ``2 * t0 < min_c b_c``.

Operators with no Table II class (Python execs, streaming-state execs, wrappers such as
``WholeStageCodegenExec`` and unknown execs) stay on the CPU with a reason, and a pinned class
always goes to its pinned device.

Examples
--------
>>> dag = PlanDag((Operator(0, "HashAggregateExec", (1,)), Operator(1, "FileSourceScanExec", ())))
>>> mapper = DeviceMapper()
>>> mapper.map(dag, partition_bytes=1024).devices
('CPU', 'CPU')
>>> mapper.map(dag, partition_bytes=100 * 150 * 1024).devices
('GPU', 'GPU')
>>> mapper.map(dag, partition_bytes=100 * 150 * 1024).summary()
'2 ops: 2 GPU, 0 CPU'
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass

from .exceptions import ConfigError
from .protocol import BATCH, Param, Tunable, positive

__all__ = [
    "BASE_COSTS",
    "DEFAULT_INFLECTION_POINT",
    "DEFAULT_TRANSITION_COST",
    "INITIAL_PREFERENCE",
    "max_transition_cost",
    "DeviceMapper",
    "DevicePlan",
    "Operator",
    "OperatorPlacement",
    "PlanDag",
    "exec_class",
    "unmapped_reason",
]

CPU = "CPU"
GPU = "GPU"
DEVICES = (CPU, GPU)

DEFAULT_INFLECTION_POINT = 150 * 1024
DEFAULT_TRANSITION_COST = 0.1

#: Table II: initial device preference per class (``None`` = neutral).
INITIAL_PREFERENCE: Mapping[str, str | None] = {
    "Aggregation": CPU,
    "Filter": CPU,
    "Shuffle": CPU,
    "Projection": None,
    "Join": None,
    "Expand": None,
    "Scan": GPU,
    "Sort": GPU,
}

#: Table II: base cost per class.
BASE_COSTS: Mapping[str, float] = {
    "Aggregation": 1.0,
    "Filter": 1.0,
    "Shuffle": 1.0,
    "Projection": 0.9,
    "Join": 0.9,
    "Expand": 0.9,
    "Scan": 0.8,
    "Sort": 0.8,
}

#: How much dearer (or cheaper) the GPU is at the inflection point for a CPU- (GPU-) preferring class.
PREFERENCE_MARGIN = 0.1
GPU_EXPONENT = 0.5

_EXEC_CLASSES: Mapping[str, str] = {
    "HashAggregateExec": "Aggregation",
    "ObjectHashAggregateExec": "Aggregation",
    "SortAggregateExec": "Aggregation",
    "FilterExec": "Filter",
    "ShuffleExchangeExec": "Shuffle",
    "BroadcastExchangeExec": "Shuffle",
    "ProjectExec": "Projection",
    "SortMergeJoinExec": "Join",
    "BroadcastHashJoinExec": "Join",
    "ShuffledHashJoinExec": "Join",
    "BroadcastNestedLoopJoinExec": "Join",
    "CartesianProductExec": "Join",
    "ExpandExec": "Expand",
    "FileSourceScanExec": "Scan",
    "BatchScanExec": "Scan",
    "MicroBatchScanExec": "Scan",  # a streaming source's micro-batch (DataSource V2)
    "ContinuousScanExec": "Scan",
    "InMemoryTableScanExec": "Scan",
    "LocalTableScanExec": "Scan",
    "RDDScanExec": "Scan",
    "SortExec": "Sort",
}

_PYTHON_EXECS = frozenset({
    "ArrowEvalPythonExec", "BatchEvalPythonExec", "FlatMapGroupsInPandasExec", "PythonMapInArrowExec",
    "MapInPandasExec", "FlatMapCoGroupsInPandasExec", "AggregateInPandasExec", "WindowInPandasExec",
    "FlatMapGroupsInPandasWithStateExec", "AttachDistributedSequenceExec",
    # Spark 4.1 names of the Arrow-based execs
    "ArrowAggregatePythonExec", "ArrowWindowPythonExec", "MapInArrowExec",
})
_STREAMING_EXECS = frozenset({
    "StateStoreSaveExec", "StateStoreRestoreExec", "StreamingSymmetricHashJoinExec",
    "EventTimeWatermarkExec", "StreamingDeduplicateExec", "FlatMapGroupsWithStateExec",
    "SessionWindowStateStoreSaveExec", "SessionWindowStateStoreRestoreExec",
    "StreamingGlobalLimitExec", "StreamingLocalLimitExec", "StreamingRelationExec",
    "StreamingDeduplicateWithinWatermarkExec", "TransformWithStateExec",
})


def _canonical(exec_name: str) -> str:
    # Plan-graph node names drop the ``Exec`` suffix ("HashAggregate"); accept both spellings.
    if exec_name not in _EXEC_CLASSES and exec_name + "Exec" in _EXEC_CLASSES:
        return exec_name + "Exec"
    return exec_name


def exec_class(exec_name: str) -> str | None:
    """Return the Table II class of a Spark physical operator, or ``None`` when it has none.

    Parameters
    ----------
    exec_name
        Class name of the Spark exec, e.g. ``"HashAggregateExec"`` (the ``Exec`` suffix may be
        left out).

    Examples
    --------
    >>> exec_class("SortMergeJoinExec"), exec_class("Filter"), exec_class("StateStoreSaveExec")
    ('Join', 'Filter', None)
    """
    return _EXEC_CLASSES.get(_canonical(exec_name))


def unmapped_reason(exec_name: str) -> str | None:
    """Return why an exec stays on the CPU without a cost decision, or ``None`` when it has a class.

    Examples
    --------
    >>> unmapped_reason("ArrowEvalPythonExec"), unmapped_reason("WholeStageCodegenExec")
    ('python exec', 'no Table II class')
    """
    if exec_class(exec_name) is not None:
        return None
    if exec_name in _PYTHON_EXECS or "Python" in exec_name or "Pandas" in exec_name:
        return "python exec"
    if exec_name in _STREAMING_EXECS or exec_name.startswith(("StateStore", "Streaming")):
        return "streaming state exec"
    return "no Table II class"


@dataclass(frozen=True)
class Operator:
    """One node of a physical plan: ``children`` are the ids of the operators feeding it."""

    id: int
    exec_name: str
    children: tuple[int, ...] = ()


@dataclass(frozen=True)
class PlanDag:
    """An operator DAG; the root is the one operator that no other lists as a child.

    Raises
    ------
    ConfigError
        On duplicate ids, a child id that is not an operator, not exactly one root, or a cycle.
    """

    operators: tuple[Operator, ...]

    def __post_init__(self) -> None:
        ids = [op.id for op in self.operators]
        if not ids:
            raise ConfigError("PlanDag needs at least one operator")
        if len(set(ids)) != len(ids):
            raise ConfigError(f"PlanDag operator ids must be unique, got {ids}")
        known = set(ids)
        for op in self.operators:
            missing = [c for c in op.children if c not in known]
            if missing:
                raise ConfigError(f"operator {op.id} lists unknown children {missing}")
        listed = {c for op in self.operators for c in op.children}
        roots = [i for i in ids if i not in listed]
        if len(roots) != 1:
            raise ConfigError(f"PlanDag needs exactly one root, found {roots}")
        self.topological_order()  # raises on a cycle

    @property
    def root(self) -> int:
        """Id of the root operator."""
        listed = {c for op in self.operators for c in op.children}
        return next(op.id for op in self.operators if op.id not in listed)

    def topological_order(self) -> tuple[int, ...]:
        """Operator ids, children before parents (iterative, so deep plans do not recurse)."""
        by_id = {op.id: op for op in self.operators}
        state: dict[int, int] = {}  # 1 = on the stack, 2 = done
        order = []
        for start, start_op in by_id.items():
            if state.get(start) == 2:
                continue
            stack = [(start, iter(start_op.children))]
            state[start] = 1
            while stack:
                node, it = stack[-1]
                child = next(it, None)
                if child is None:
                    stack.pop()
                    state[node] = 2
                    order.append(node)
                elif state.get(child) == 1:
                    raise ConfigError(f"PlanDag has a cycle through operator {child}")
                elif child not in state:
                    state[child] = 1
                    stack.append((child, iter(by_id[child].children)))
        return tuple(order)


@dataclass(frozen=True)
class OperatorPlacement:
    """The device chosen for one operator and the costs (transition included) that chose it.

    ``cpu_cost``/``gpu_cost`` are ``None`` for operators with no Table II class.
    ``children`` are the ids of the operators feeding this one (the DAG's edges, so that a
    recorded plan can be drawn).
    """

    id: int
    exec_name: str
    op_class: str | None
    device: str
    cpu_cost: float | None
    gpu_cost: float | None
    reason: str
    children: tuple[int, ...] = ()


@dataclass(frozen=True)
class DevicePlan:
    """Result of :meth:`DeviceMapper.map`: one placement per operator, in the DAG's order."""

    entries: tuple[OperatorPlacement, ...]
    inflection_point: float
    partition_bytes: float

    @property
    def devices(self) -> tuple[str, ...]:
        """Devices in the order of the entries."""
        return tuple(e.device for e in self.entries)

    def device_of(self, op_id: int) -> str:
        """Device of operator ``op_id``."""
        for e in self.entries:
            if e.id == op_id:
                return e.device
        raise ConfigError(f"no operator with id {op_id} in this plan")

    def summary(self) -> str:
        """One line, e.g. ``'5 ops: 3 GPU, 2 CPU'``."""
        n_gpu = sum(1 for e in self.entries if e.device == GPU)
        return f"{len(self.entries)} ops: {n_gpu} GPU, {len(self.entries) - n_gpu} CPU"

    def to_dict(self) -> dict:
        """A JSON-ready dict (for a metrics record)."""
        return {
            "inflection_point": self.inflection_point,
            "partition_bytes": self.partition_bytes,
            "entries": [{**asdict(e), "children": list(e.children)} for e in self.entries],
        }

    def to_json(self) -> str:
        """:meth:`to_dict` as a JSON string."""
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: Mapping) -> DevicePlan:
        """Rebuild a plan from :meth:`to_dict` output (or parsed :meth:`to_json`)."""
        return cls(
            entries=tuple(OperatorPlacement(**{**e, "children": tuple(e.get("children", ()))})
                          for e in data["entries"]),
            inflection_point=data["inflection_point"],
            partition_bytes=data["partition_bytes"],
        )


_positive = positive


def _margin(op_class: str) -> float:
    """``m_c`` of Eq. 8 from the class's initial preference."""
    pref = INITIAL_PREFERENCE[op_class]
    return 1.0 + (PREFERENCE_MARGIN if pref == CPU else -PREFERENCE_MARGIN if pref == GPU else 0.0)


def max_transition_cost(base_costs: Mapping[str, float]) -> float:
    """The largest ``t0`` that keeps the mapping monotone: ``min_c(b_c * m_c) / 2``.

    >>> round(max_transition_cost(BASE_COSTS), 2)
    0.36
    """
    return min(cost * _margin(c) for c, cost in base_costs.items()) / 2.0


def _check_monotone(t0: float, base_costs: Mapping[str, float]) -> None:
    limit = max_transition_cost(base_costs)
    if t0 > limit:
        raise ConfigError(
            f"transition cost {t0:g} would let operators move from the GPU back to the CPU as "
            f"batches grow; with these base costs it must be <= {limit:g}"
        )


def _known_class(op_class: str) -> str:
    if op_class not in BASE_COSTS:
        raise ConfigError(f"unknown operator class {op_class!r}; known: {', '.join(BASE_COSTS)}")
    return op_class


class DeviceMapper(Tunable):
    """Maps each operator of a plan to the CPU or the GPU (Algorithm 2); safe to retune while running.

    Parameters
    ----------
    inflection_point
        Partition size in bytes at which each class's initial preference holds (default 150 KiB).
    base_costs
        Base cost per Table II class; classes left out keep the Table II value.
    transition_cost
        Base transition cost ``t0`` of Eq. 9 (default 0.1).
    pins
        ``{class: "CPU" | "GPU"}``: classes always placed on that device.

    Examples
    --------
    >>> m = DeviceMapper(pins={"Sort": "GPU"})
    >>> m.set_inflection_point(64 * 1024)
    >>> m.snapshot()["inflection_point"], m.snapshot()["pins"]
    (65536.0, {'Sort': 'GPU'})
    """

    prefix = "mapper"
    change_phase = BATCH  # read when each batch is placed
    PARAMS = (
        Param("inflection_point", float, low=0, low_open=True, log_scale=True,
              doc="partition bytes at which each class's preference holds"),
        Param("transition_cost", float, low=0, doc="base CPU/GPU transition cost t0 (Eq. 9)"),
    )

    def __init__(
        self,
        inflection_point: float = DEFAULT_INFLECTION_POINT,
        base_costs: Mapping[str, float] | None = None,
        transition_cost: float = DEFAULT_TRANSITION_COST,
        pins: Mapping[str, str | None] | None = None,
    ) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._inflection_point = _positive("inflection_point", inflection_point)
        self._base_costs: dict[str, float] = dict(BASE_COSTS)
        self._transition_cost = _positive("transition_cost", transition_cost, allow_zero=True)
        self._pins: dict[str, str] = {}
        self._changes: list[dict] = []
        costs = dict(BASE_COSTS)
        for op_class, value in (base_costs or {}).items():
            costs[_known_class(op_class)] = _positive(f"base cost of {op_class}", value)
        _check_monotone(self._transition_cost, costs)
        self._base_costs = costs
        for op_class, device in (pins or {}).items():
            self.pin(op_class, device)
        self._changes.clear()  # the constructor's values are not live changes
        self.changelog.take()

    # -- parameters (each write and each map() read holds the lock) ------------------------------

    def set_inflection_point(self, nbytes: float, *, record: bool = True) -> None:
        """Set the inflection point in bytes (> 0).

        ``record=False`` is for the online optimizer, whose every step is already in the
        batch's ``inflection_point``; a person's change is recorded (:meth:`pop_changes`).
        """
        value = _positive("inflection_point", nbytes)
        with self._lock:
            if record:
                self._record("inflection_point", self._inflection_point, value)
            self._inflection_point = value

    def set_base_cost(self, op_class: str, value: float) -> None:
        """Set the base cost (> 0) of a Table II class."""
        _known_class(op_class)
        cost = _positive(f"base cost of {op_class}", value)
        with self._lock:
            _check_monotone(self._transition_cost, {**self._base_costs, op_class: cost})
            self._record(f"base_cost.{op_class}", self._base_costs[op_class], cost)
            self._base_costs[op_class] = cost

    def set_transition_cost(self, value: float) -> None:
        """Set the base transition cost ``t0`` (>= 0)."""
        cost = _positive("transition_cost", value, allow_zero=True)
        with self._lock:
            _check_monotone(cost, self._base_costs)
            self._record("transition_cost", self._transition_cost, cost)
            self._transition_cost = cost

    def pin(self, op_class: str, device: str | None) -> None:
        """Always place ``op_class`` on ``device`` ("CPU" or "GPU"); ``None`` removes the pin."""
        _known_class(op_class)
        if device is not None and device not in DEVICES:
            raise ConfigError(f"pin device must be 'CPU', 'GPU' or None, got {device!r}")
        with self._lock:
            self._record(f"pin.{op_class}", self._pins.get(op_class), device)
            if device is None:
                self._pins.pop(op_class, None)
            else:
                self._pins[op_class] = device

    def _record(self, param: str, old, new) -> None:
        # called with the lock held; unchanged values are not changes
        if old != new:
            self._changes.append({"param": self.qualified(param), "old": old, "value": new, "at": time.time()})
            self.log_change(param, new, old=old)

    def pop_changes(self) -> list[dict]:
        """The parameter changes since the last call (``param``, ``old``, ``value``, ``at``).

        The stream records them with the id of the batch they first apply to.

        >>> m = DeviceMapper()
        >>> m.set_transition_cost(0.2); m.set_transition_cost(0.2)
        >>> [(c["param"], c["old"], c["value"]) for c in m.pop_changes()], m.pop_changes()
        ([('mapper.transition_cost', 0.1, 0.2)], [])
        """
        with self._lock:
            changes, self._changes = self._changes, []
        return changes

    @property
    def inflection_point(self) -> float:
        return self._inflection_point

    @property
    def transition_cost(self) -> float:
        return self._transition_cost

    def _apply_transition_cost(self, value: float) -> None:
        self.set_transition_cost(value)

    def _apply_inflection_point(self, value: float) -> None:
        self.set_inflection_point(value)

    def snapshot(self) -> dict:
        """The current parameters as a plain dict."""
        with self._lock:
            return {
                "inflection_point": self._inflection_point,
                "base_costs": dict(self._base_costs),
                "transition_cost": self._transition_cost,
                "pins": dict(self._pins),
            }

    # -- Algorithm 2 ----------------------------------------------------------------------------

    def map(self, dag: PlanDag, partition_bytes: float) -> DevicePlan:
        """Place every operator of ``dag`` for partitions of ``partition_bytes`` bytes (> 0)."""
        size = _positive("partition_bytes", partition_bytes)
        params = self.snapshot()  # one consistent view even if the notebook retunes meanwhile
        ip, base, t0, pins = (params["inflection_point"], params["base_costs"],
                              params["transition_cost"], params["pins"])
        r = size / ip
        transition = t0 * r * math.sqrt(min(1.0, r))  # Eq. 9

        by_id = {op.id: op for op in dag.operators}
        root = dag.root
        placed: dict[int, OperatorPlacement] = {}
        for op_id in dag.topological_order():
            op = by_id[op_id]
            op_class = exec_class(op.exec_name)
            if op_class is None:
                placed[op_id] = OperatorPlacement(op_id, op.exec_name, None, CPU, None, None,
                                                  unmapped_reason(op.exec_name) or "no Table II class",
                                                  tuple(op.children))
                continue
            b = base[op_class]
            margin = _margin(op_class)
            cpu = b * r  # Eq. 7
            gpu = b * margin * r ** GPU_EXPONENT  # Eq. 8
            is_leaf = not op.children
            previous = None
            if not is_leaf:
                previous = GPU if any(placed[c].device == GPU for c in op.children) else CPU
            gpu += transition * (int(is_leaf) + int(op_id == root) + int(previous == CPU))
            cpu += transition * int(previous == GPU)
            if op_class in pins:
                device, reason = pins[op_class], "pinned"
            elif cpu < gpu:
                device, reason = CPU, "cpu cheaper"
            elif gpu < cpu:
                device, reason = GPU, "gpu cheaper"
            else:
                device, reason = previous or GPU, "tie: previous device" if previous else "tie: leaf stays on GPU"
            placed[op_id] = OperatorPlacement(op_id, op.exec_name, op_class, device, cpu, gpu, reason,
                                              tuple(op.children))
        return DevicePlan(
            entries=tuple(placed[op.id] for op in dag.operators),
            inflection_point=ip,
            partition_bytes=float(size),
        )
