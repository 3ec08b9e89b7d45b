"""The protocol every live object shares: declared parameters, one change log, per-batch hooks.

A live object declares its :class:`Param` s; a change is validated (``ValueError``
naming the value) and written to one :class:`ChangeLog`, which the run loop
stamps with the id of the first batch the change is in force for.

>>> class Doubler(BatchController):
...     prefix = "doubler"
...     PARAMS = (Param("factor", float, low=0, doc="rows are multiplied by this"),)
...     def __init__(self):
...         super().__init__()
...         self.factor = 2.0
...     def after_batch(self, record):
...         return {"doubled_rows": record.rows * self.factor}
>>> d = Doubler()
>>> d.set_param("factor", 3)
>>> [(c.param, c.old, c.value) for c in d.changelog.take()]
[('doubler.factor', 2.0, 3.0)]
>>> d.set_param("factor", -1)
Traceback (most recent call last):
...
lmstream_kit.exceptions.ConfigError: doubler.factor must be >= 0, got -1
"""

from __future__ import annotations

import math
import numbers
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

from .exceptions import ConfigError

__all__ = [
    "ADMISSION",
    "BATCH",
    "BatchContext",
    "BatchController",
    "Change",
    "ChangeLog",
    "Control",
    "LiveView",
    "Param",
    "StreamHost",
    "StreamInfo",
    "Tunable",
    "positive",
]

#: a change the gate reads: in force from the next admitted batch
ADMISSION = "admission"
#: a change the batch's placement reads: in force from the next batch that runs
BATCH = "batch"

_MISSING = object()

#: stamped changes a change log keeps in memory
HISTORY_KEPT = 10_000


def positive(name: str, value: Any, *, allow_zero: bool = False) -> float:
    """``value`` as a float when it is a finite number > 0 (>= 0 with ``allow_zero``), else ConfigError.

    >>> positive("rate", 2), positive("cost", 0, allow_zero=True)
    (2.0, 0.0)
    >>> positive("rate", True)
    Traceback (most recent call last):
    ...
    lmstream_kit.exceptions.ConfigError: rate must be a finite number > 0, got True
    """
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(f"{name} must be a finite number {'>= 0' if allow_zero else '> 0'}, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class Param:
    """A declared live parameter: its type, its bounds or choices, and whether a change restarts the query.

    >>> Param("quantile", float, low=0, high=1, low_open=True, high_open=True).validate(0.9)
    0.9
    >>> Param("mode", str, choices=("a", "b")).validate("c")
    Traceback (most recent call last):
    ...
    lmstream_kit.exceptions.ConfigError: mode must be one of 'a', 'b', got 'c'
    """

    name: str
    kind: type = float
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    choices: tuple | None = None
    nullable: bool = False
    restart: bool = False
    doc: str = ""
    log_scale: bool = False  # a slider over this parameter moves in powers of two
    label: str = ""  # what a view calls it (default: the name)
    unit: str = ""  # "bytes" shows values as KiB/MiB
    step: float | None = None  # a slider's step (log2 units for log_scale)
    hint: str = ""  # added to a bound's message, e.g. "0 = tumbling window"; a text box's placeholder

    def validate(self, value: Any, *, label: str | None = None) -> Any:
        """The value, coerced to ``kind``; ConfigError (a ValueError) naming it when it is not allowed."""
        name = label or self.name
        if value is None and self.nullable:
            return None
        if self.choices is not None:
            if value not in self.choices:
                known = ", ".join(repr(c) for c in self.choices)
                raise ConfigError(f"{name} must be one of {known}, got {value!r}")
            return value
        if self.kind is bool:
            if not isinstance(value, bool):
                raise ConfigError(f"{name} must be True or False, got {value!r}")
            return value
        if self.kind in (int, float):
            integral = numbers.Integral if self.kind is int else numbers.Real
            if isinstance(value, bool) or not isinstance(value, integral):
                what = "an integer" if self.kind is int else "a number"
                raise ConfigError(f"{name} must be {what}, got {value!r}")
            v = self.kind(value)
            if isinstance(v, float) and not math.isfinite(v):
                raise ConfigError(f"{name} must be finite, got {value!r}")
            hint = f" ({self.hint})" if self.hint else ""
            if self.low is not None and (v <= self.low if self.low_open else v < self.low):
                raise ConfigError(f"{name} must be {'>' if self.low_open else '>='} {self.low:g}{hint}, got {value!r}")
            if self.high is not None and (v >= self.high if self.high_open else v > self.high):
                raise ConfigError(f"{name} must be {'<' if self.high_open else '<='} {self.high:g}{hint}, got {value!r}")
            return v
        if not isinstance(value, self.kind):
            raise ConfigError(f"{name} must be a {self.kind.__name__}, got {value!r}")
        return value


@dataclass(frozen=True)
class Change:
    """One live change: ``param`` (owner-qualified), the old and new value, when, and when it applies."""

    param: str
    value: Any
    old: Any = _MISSING
    at: float = 0.0
    phase: str = ADMISSION
    detail: Mapping[str, Any] = field(default_factory=dict)
    source: str = ""  # the kind of object that made it (its class name)

    def to_dict(self) -> dict:
        """The record's form: ``param``, ``old`` (when known), ``value``, any detail, ``at``.

        >>> Change("controller.slide_s", 2.0, old=5.0, at=1.0).to_dict()
        {'param': 'controller.slide_s', 'old': 5.0, 'value': 2.0, 'at': 1.0}
        """
        out: dict[str, Any] = {"param": self.param}
        if self.old is not _MISSING:
            out["old"] = self.old
        out["value"] = self.value
        out.update(self.detail)
        out["at"] = self.at
        return out


class ChangeLog:
    """Thread-safe log of live changes; the run loop takes them per phase and stamps their batch.

    >>> log = ChangeLog()
    >>> _ = log.record("policy", "asap", old="lmstream")
    >>> _ = log.record("mapper.transition_cost", 0.2, old=0.1, phase=BATCH)
    >>> [c.param for c in log.take(ADMISSION)], [c.param for c in log.take(BATCH)], log.take()
    (['policy'], ['mapper.transition_cost'], [])
    >>> log.stamp(7, log.take())  # nothing pending
    >>> _ = log.record("policy", "fixed", old="asap"); log.stamp(8, log.take())
    >>> [(b, c.param, c.value) for b, c in log.history()]
    [(8, 'policy', 'fixed')]
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: list[Change] = []
        self._history: deque[tuple[int, Change]] = deque(maxlen=HISTORY_KEPT)

    def record(self, param: str, value: Any, *, old: Any = _MISSING, phase: str = ADMISSION,
               source: str = "", **detail: Any) -> Change:
        """Log a change now; ``detail`` adds fields to its record form (e.g. ``restart=True``)."""
        change = Change(param, value, old=old, at=time.time(), phase=phase, detail=detail, source=source)
        with self._lock:
            self._pending.append(change)
        return change

    def pending(self) -> list[Change]:
        """The changes not taken yet, oldest first (nothing is taken)."""
        with self._lock:
            return list(self._pending)

    def take(self, phase: str | None = None) -> list[Change]:
        """The pending changes of ``phase`` (all phases if None), oldest first; each is taken once."""
        with self._lock:
            out = [c for c in self._pending if phase is None or c.phase == phase]
            self._pending = [c for c in self._pending if not (phase is None or c.phase == phase)]
        return out

    def stamp(self, batch_id: int, changes: Sequence[Change]) -> None:
        """Remember that ``changes`` were first in force for ``batch_id``."""
        with self._lock:
            self._history.extend((int(batch_id), c) for c in changes)

    def history(self) -> list[tuple[int, Change]]:
        """The stamped changes with their batch ids, oldest first: the newest :data:`HISTORY_KEPT`
        (every change is also in its batch's record, on disk)."""
        with self._lock:
            return list(self._history)


@dataclass(frozen=True)
class Control:
    """A parameter as a view draws it: key, value, bounds or choices, why it is disabled, and its setter.

    ``low``/``high`` are the range a view offers (default: the parameter's
    bounds); ``doc`` its tooltip (default: the parameter's doc).  A setter that
    restarts the query (``param.restart``) is slow: a view calls it off its UI thread.
    """

    key: str
    param: Param
    value: Any
    setter: Callable[[Any], None]
    disabled: str | None = None  # why it cannot be changed now, or None
    owner: str = ""
    low: float | None = None
    high: float | None = None
    doc: str = ""

    @property
    def label(self) -> str:
        return self.param.label or self.key

    @property
    def tooltip(self) -> str:
        return self.doc or self.param.doc

    @property
    def range(self) -> tuple[float | None, float | None]:
        """``(low, high)`` the view offers."""
        return (self.param.low if self.low is None else self.low,
                self.param.high if self.high is None else self.high)


class Tunable:
    """A live object: declared parameters, validated setters, changes written to one change log.

    Subclasses list :attr:`PARAMS`; a parameter is read with :meth:`param_value` (the attribute
    of its name unless the class says otherwise) and written through :meth:`set_param`, which
    validates it and calls
    ``_apply_<name>(value)`` when the class defines one (else sets the attribute).
    """

    #: name prefixing this object's parameters in the change log ("" for none)
    prefix: ClassVar[str] = ""
    #: the live parameters
    PARAMS: ClassVar[tuple[Param, ...]] = ()
    #: when this object's changes are in force (ADMISSION or BATCH)
    change_phase: ClassVar[str] = ADMISSION
    #: whether views draw its parameters (False: housekeeping, changed with set_param or reconfigure)
    drawn: ClassVar[bool] = True

    def __init__(self) -> None:
        self._changelog: ChangeLog | None = None

    @property
    def changelog(self) -> ChangeLog:
        """The log this object's changes go to (its own until :meth:`bind_changelog`)."""
        if getattr(self, "_changelog", None) is None:
            self._changelog = ChangeLog()
        return self._changelog

    def bind_changelog(self, log: ChangeLog) -> None:
        """Send this object's changes to ``log`` (the stream's), with those not yet taken."""
        pending = self.changelog.take() if self.changelog is not log else []
        self._changelog = log
        for c in pending:
            log.record(c.param, c.value, old=c.old, phase=c.phase, source=c.source, **c.detail)

    def qualified(self, param: str) -> str:
        return f"{self.prefix}.{param}" if self.prefix else param

    def log_change(self, param: str, value: Any, old: Any = _MISSING, **detail: Any) -> None:
        """Write one change of ``param`` to the change log (unchanged values are not changes)."""
        if old is not _MISSING and old == value:
            return
        self.changelog.record(self.qualified(param), value, old=old, phase=self.change_phase,
                              source=type(self).__name__, **detail)

    def pending_changes(self) -> list[dict]:
        """This object's changes not yet in force for a batch, in the record's form."""
        return [c.to_dict() for c in self.changelog.pending() if c.source == type(self).__name__]

    def param(self, name: str) -> Param:
        for p in self.PARAMS:
            if p.name == name:
                return p
        known = ", ".join(p.name for p in self.PARAMS) or "(none)"
        raise ConfigError(f"{self.qualified(name)} is not a live parameter; known: {known}")

    def set_param(self, name: str, value: Any) -> None:
        """Validate and apply one parameter; the change is logged."""
        p = self.param(name)
        value = p.validate(value, label=self.qualified(name))
        apply = getattr(self, f"_apply_{name}", None)
        if apply is not None:
            apply(value)
            return
        old = getattr(self, name)
        setattr(self, name, value)
        self.log_change(name, value, old=old)

    def param_value(self, name: str) -> Any:
        """The value in force of the declared parameter ``name`` (default: the attribute of that name)."""
        return getattr(self, name)

    def param_values(self) -> dict:
        return {p.name: self.param_value(p.name) for p in self.PARAMS}

    def disabled_reason(self, name: str) -> str | None:
        """Why ``name`` cannot be changed right now (None: it can)."""
        return None

    def controls(self) -> list[Control]:
        """The declared parameters as controls a view can draw (none where the class is not ``drawn``)."""
        if not self.drawn:
            return []
        return [
            Control(self.qualified(p.name), p, self.param_value(p.name),
                    lambda v, n=p.name: self.set_param(n, v), self.disabled_reason(p.name), self.prefix)
            for p in self.PARAMS
        ]


@dataclass
class BatchContext:
    """What a controller sees of a batch before it runs (``before_batch``)."""

    batch_id: int
    nbytes: int
    rows: int
    datasets: Sequence[Any]
    admission: Mapping[str, Any]  # what the controllers returned at admission
    engine: Any = None  # the engine adapter's per-batch handle (plan, session), None in tests


class BatchController(Tunable):
    """A per-batch controller plugged into the run loop; every hook has a no-op default.

    ``admission_held()``
        asked before the gate, whenever Spark asks for the next batch: why nothing may be
        admitted now (a full disk), or None; while any controller holds, data waits, none is lost;
    ``on_admit(pending)``
        the gate admitted ``pending``: return fields to carry to the batch (or None);
    ``on_plan(start, end)``
        Spark is planning the batch of spool datasets ``start..end``: return source settings
        for it (``{"partitions": n}``: the input partitions to split it into) or None;
    ``before_batch(ctx)``
        the batch is about to run: place it, set confs; return record fields (or None);
    ``after_batch(record)``
        the batch completed and its record is computed: learn from it, and return
        fields to add to the record (or None) before it is written;
    ``on_progress(progress)``
        Spark reported a batch's progress (a dict: :func:`lmstream_kit.engine.listener.progress_record`,
        with the state's rows, bytes and removals), shortly after the batch; on Spark's listener thread;
    ``on_batch_failed(ctx, error)``
        the batch failed: undo a change made at its start and return True, and the run loop
        runs it again once (a new logic that fails on data goes back to the old one);
    ``on_resume(records)``
        the stream resumed a run directory: ``records`` are the newest batch records its earlier
        runs wrote (oldest first), to learn from before the first batch: at least
        :data:`~lmstream_kit.runloop.RECORDS_KEPT` of them, more where a controller's
        ``resume_records`` asks for more (a run of weeks is not read whole);
    ``plugged(host)``
        it was plugged into ``host`` (a :class:`StreamHost`: a LiveStream, an attached query),
        which says what it can change for the controller; raise ConfigError to refuse the host;
        a LiveStream also offers its ``journal``, its workload's running ``batch_program`` and
        ``task_function_unsupported(fn)`` (why Spark's tasks cannot load ``fn``, or None);
    ``close()``
        the stream stops.
    """

    #: record fields this controller adds, with what they mean
    FIELDS: ClassVar[Mapping[str, str]] = {}

    @property
    def resume_records(self) -> int:
        """How many of the newest records :meth:`on_resume` needs (0: the default is enough)."""
        return 0

    def admission_held(self) -> str | None:
        return None

    def on_admit(self, pending: Sequence[Any]) -> Mapping[str, Any] | None:
        return None

    def on_plan(self, start: int, end: int) -> Mapping[str, Any] | None:
        return None

    def before_batch(self, ctx: BatchContext) -> Mapping[str, Any] | None:
        return None

    def after_batch(self, record: Any) -> Mapping[str, Any] | None:
        return None

    def plugged(self, host: "StreamHost") -> None:
        return None

    def on_progress(self, progress: Mapping[str, Any]) -> None:
        return None

    def on_resume(self, records: Sequence[Mapping[str, Any]]) -> None:
        return None

    def on_batch_failed(self, ctx: BatchContext, error: BaseException) -> bool:
        """The batch failed with ``error``: return True where this controller undid a change that
        batch ran under, so that the run loop runs the batch once more, as before the change."""
        return False

    def in_force(self) -> Mapping[str, Any]:
        """What this controller has in force, by journal op: how a restart after a crash ends the
        transactions of its changes that were left open (committed where the new value is in force)."""
        return {}

    def close(self) -> None:
        return None


@runtime_checkable
class StreamHost(Protocol):
    """What a stream does for the controllers plugged into it (:meth:`BatchController.plugged`).

    ``parallelism_unsupported(kind)``: why the stream cannot set a parallelism knob of ``kind``
    (``"input"``: the source's partitions per batch; ``"shuffle"``: a stateless shuffle's;
    ``"state"``: the state store's, with a restart), or None where it can.
    ``request_state_partitions(n, why)``: repartition the query's state into ``n`` at the next
    batch boundary, in the background (the stream records the change, or why it was aborted).
    """

    def parallelism_unsupported(self, kind: str) -> str | None:
        """Why this stream cannot set a knob of ``kind`` (None: it can)."""

    def request_state_partitions(self, partitions: int, why: str = "") -> None:
        """Repartition the query's state into ``partitions`` soon (a restart), without waiting."""


@dataclass(frozen=True)
class StreamInfo:
    """How a view names a live stream: its workload, its policy and a detail (``"speedup 4×"``)."""

    workload: str
    policy: str
    detail: str = ""


@runtime_checkable
class LiveView(Protocol):
    """What a view (the Dashboard) reads of a live stream: a LiveStream's, an attached query's.

    ``remove_on_batch(callback)``, where a stream has it, is called when the view closes.
    """

    run_dir: Path

    @property
    def records(self) -> list[dict]:
        """Copies of the records so far, oldest first."""

    def on_batch(self, callback: Callable[[dict], None]) -> None:
        """Call ``callback(record)`` after every micro-batch (from Spark's thread)."""

    def controls(self) -> list[Control]:
        """The parameters a view draws, those that cannot change with the reason."""

    def info(self) -> StreamInfo:
        """What the view's title and status line name the stream by."""
