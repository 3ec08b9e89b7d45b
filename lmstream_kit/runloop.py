"""The run loop: admission at Spark's polls, the controllers' hooks around each batch, one record each.

No Spark here: the engine calls :meth:`RunLoop.on_latest` / :meth:`RunLoop.on_planned`
from its source and :meth:`RunLoop.run_batch` from its sink with a batch handle, so
the loop is tested with plain objects.  :class:`~lmstream_kit.live.LiveStream` owns one.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .admission import DRAIN, HOLD, AdmissionBook
from .exceptions import ConfigError
from .protocol import ADMISSION, BATCH, BatchContext, BatchController, ChangeLog
from .record import FIELD_DOCS, BatchRecord, batch_bytes

#: batch records a stream keeps in memory (about 2 KB each; a day of 2 s batches is 43,200, all in metrics.jsonl)
RECORDS_KEPT = 1000

__all__ = ["BatchSettings", "RunLoop", "apply_after_batch"]

BatchCallback = Callable[[dict], None]


def apply_after_batch(controllers: Sequence[BatchController], record: BatchRecord) -> BatchRecord:
    """Every controller's ``after_batch`` on ``record``, in order; the record with what they added.

    A controller that raises does not fail the batch (its output is written) nor stop the later
    ones: its error goes to the record's ``after_batch_errors`` ``{controller: message}``.
    """
    failed: dict[str, str] = {}
    for controller in controllers:
        try:
            added = controller.after_batch(record)
        except Exception as exc:  # noqa: BLE001
            failed[type(controller).__name__] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
            continue
        if added:
            record = dataclasses.replace(record, extra={**record.extra, **added})
    if failed:
        record = dataclasses.replace(record, extra={**record.extra, "after_batch_errors": failed})
    return record


@dataclass(frozen=True)
class BatchSettings:
    """What the loop needs of the stream when a batch completes (it may change between batches)."""

    workload: str
    policy: str
    bound_s: float | None
    target_s: float
    output_dir: Path | None


class RunLoop:
    """Admits spool datasets through the gate and runs each batch through the controllers.

    Parameters
    ----------
    gate : BatchController
        Decides admissions (``decide(now, pending)``); replaced on a policy switch.
    placement : BatchController
        Places each batch and runs it (``run_batch``): on Spark, or on the twin.
    changelog : ChangeLog
        The stream's one change log.
    settings : callable
        Returns the :class:`BatchSettings` in force.
    clock : callable
        Epoch seconds (``time.time``); arrivals and records use the same clock.
    """

    def __init__(self, gate: BatchController, placement: Any, changelog: ChangeLog, *,
                 settings: Callable[[], BatchSettings], clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.lock = threading.RLock()
        self.batch_done = threading.Condition(self.lock)
        self.book = AdmissionBook()
        self.changelog = changelog
        self.gate = gate
        self.placement = placement
        self.settings = settings
        self.spool: Any = None  # set when the stream starts
        self.sink: Callable[[dict], None] = lambda record: None  # writes each record as it is made
        self.after_batch: Callable[[], None] = lambda: None  # e.g. start the feed after batch 0
        #: collects the engine's heap (a gate's ``"collect"`` decision; None: the engine cannot), run in a
        #: thread of its own so that the source's poll is answered at once
        self.collect_heap: Callable[[], None] | None = None
        self._collecting: threading.Thread | None = None
        self.failure: BaseException | None = None
        #: why a controller holds admission now (``admission_held``), or None
        self.held: str | None = None
        self._plugins: list[BatchController] = []
        self._records: deque[dict] = deque(maxlen=RECORDS_KEPT)  # the newest; all are in metrics.jsonl
        #: batches run and rows they processed since the stream started (all of them, kept or not)
        self.batches_done = 0
        self.rows_done = 0
        self._callbacks: list[BatchCallback] = []

    # ------------------------------------------------------------------ controllers
    @property
    def controllers(self) -> list[BatchController]:
        """The gate, the placement, then plug-ins: the order their hooks run in."""
        with self.lock:
            return [self.gate, self.placement, *self._plugins]

    def add_controller(self, controller: BatchController) -> BatchController:
        """Plug a per-batch controller in; its hooks run from the next batch boundary."""
        if not isinstance(controller, BatchController):
            raise ConfigError(f"a controller must be a BatchController, got {type(controller).__name__}")
        controller.bind_changelog(self.changelog)
        with self.lock:
            self._plugins.append(controller)
        return controller

    @property
    def plugins(self) -> list[BatchController]:
        with self.lock:
            return list(self._plugins)

    def record_fields(self) -> dict[str, str]:
        """Every field the records can carry, with what it means (plug-ins' included)."""
        fields = {k: v for k, v in FIELD_DOCS.items() if k != "extra"}
        for controller in self.controllers:
            fields.update(controller.FIELDS)
        return fields

    # ------------------------------------------------------------------ records and subscribers
    @property
    def records(self) -> list[dict]:
        """The records so far, oldest first (thread-safe): the newest :data:`RECORDS_KEPT`; the
        run's ``metrics.jsonl`` has every one."""
        with self.lock:
            return list(self._records)

    def on_batch(self, callback: BatchCallback) -> None:
        with self.lock:
            self._callbacks.append(callback)

    def remove_on_batch(self, callback: BatchCallback) -> None:
        with self.lock:
            self._callbacks = [c for c in self._callbacks if c != callback]

    @property
    def callbacks(self) -> list[BatchCallback]:
        with self.lock:
            return list(self._callbacks)

    # ------------------------------------------------------------------ the source's questions
    def on_initial(self) -> int:
        with self.lock:
            return self.book.initial_offset()

    def on_latest(self, start: int | None) -> int:
        """Spark asks for the next batch's end offset: the gate admits what is pending, or holds."""
        with self.lock:
            base = self.book.base(start)
            if self.book.mode == HOLD:
                return base
            self.held = self._held()
            if self.held is not None:  # e.g. a full disk: the data waits in the spool
                return base
            pending = self.spool.datasets(base)
            if not pending:
                return base
            now = self.clock()
            t0 = time.perf_counter()
            decision = None if self.book.mode == DRAIN else self.gate.decide(now, pending)
            self.book.polled(time.perf_counter() - t0)
            if decision is not None and not decision.admit:
                if decision.reason == "collect":
                    self._collect()
                return base
            take = getattr(decision, "take", None)  # a catch-up chunk: the oldest `take` datasets
            admitted = pending if take is None else pending[:max(1, int(take))]
            fields = {"decision": decision, "changes": self.changelog.take(ADMISSION)}
            for controller in self.controllers:
                fields.update(controller.on_admit(admitted) or {})
            return self.book.admit(base, end=admitted[-1].seq + 1, admitted_at=now,
                                   reason=decision.reason if decision is not None else "drain",
                                   fields=fields, policy=self.settings().policy)

    def _collect(self) -> None:
        """Start :attr:`collect_heap` in the background, unless one still runs (lock held)."""
        if self.collect_heap is None or (self._collecting is not None and self._collecting.is_alive()):
            return
        self._collecting = threading.Thread(target=self._run_collect, args=(self.collect_heap,),
                                            name="lmstream-collect-heap", daemon=True)
        self._collecting.start()

    @staticmethod
    def _run_collect(collect: Callable[[], None]) -> None:
        try:
            collect()
        except Exception:  # noqa: BLE001, S110 - a collection that fails changes nothing the stream needs
            pass

    def _held(self) -> str | None:
        """The first controller's reason to hold admission; one that raises does not hold."""
        for controller in self.controllers:
            try:
                why = controller.admission_held()
            except Exception:  # noqa: BLE001 - a broken guard must not fail Spark's source
                continue
            if why:
                return str(why)
        return None

    def on_planned(self, start: int, end: int, split: bool = True) -> int | None:
        """Spark plans the batch ``start..end``; returns the input partitions to split it into (None: the
        source's own setting).  ``split`` is False where the source hands the batch over whole
        (read in the driver), which makes one partition whatever is asked."""
        with self.lock:
            settings: dict[str, Any] = {}
            for controller in self.controllers:
                settings.update(controller.on_plan(start, end) or {})
            asked = settings.get("partitions")
            asked = int(asked) if isinstance(asked, int) and not isinstance(asked, bool) and asked >= 1 else None
            made = (min(asked, end - start) if asked is not None else None) if split else 1
            self.book.planned(start, end, now=self.clock(),
                              fields={"planned": {"partitions_asked": asked, "partitions": made}})
            return asked if split else None

    def on_progress(self, progress: dict) -> None:
        """Spark's progress of a batch, for the controllers; one that raises is left out silently."""
        for controller in self.controllers:
            try:
                controller.on_progress(progress)
            except Exception:  # noqa: BLE001, S110
                pass  # a progress hiccup must not reach Spark's listener bus

    def resume_tail(self) -> int:
        """How many of a run's newest records :meth:`on_resume` hands the controllers: at least
        :data:`RECORDS_KEPT`, more where a controller's ``resume_records`` asks for more.

        >>> from lmstream_kit.protocol import BatchController, ChangeLog
        >>> class Deep(BatchController):
        ...     resume_records = 5000
        >>> loop = RunLoop(BatchController(), BatchController(), ChangeLog(), settings=lambda: None)
        >>> loop.resume_tail(), (loop.add_controller(Deep()) and loop.resume_tail())
        (1000, 5000)
        """
        wanted = [RECORDS_KEPT]
        for controller in self.controllers:
            try:
                wanted.append(int(getattr(controller, "resume_records", 0) or 0))
            except Exception:  # noqa: BLE001, S112 - one that cannot say gets the default
                continue
        return max(wanted)

    def on_resume(self, records: Sequence[Mapping[str, Any]]) -> None:
        """The stream resumed a run directory: its earlier batch records, for the controllers to learn
        from; one that raises is left out (the run goes on without what it would have learned)."""
        for controller in self.controllers:
            try:
                controller.on_resume(records)
            except Exception:  # noqa: BLE001, S110
                pass

    # ------------------------------------------------------------------ one batch
    def run_batch(self, batch: Any) -> dict:
        """Run one micro-batch (``batch``: the engine's handle with ``batch_id``); returns its record.

        Hooks: every controller's ``before_batch``, the placement's ``run_batch``,
        then every ``after_batch``; the record is written, kept and handed to the
        subscribers.  A failure is kept and re-raised: Spark must not commit the batch.
        """
        started = self.clock()
        with self.lock:
            span, admission = self.book.begin_batch()
            controllers = self.controllers
        at_admission = dict(admission.fields) if admission else {}
        settings = self.settings()
        changes: list = []
        try:
            datasets = self.spool.datasets(span[0], span[1]) if span else []
            ctx = BatchContext(batch.batch_id, batch_bytes(datasets), sum(int(d.rows) for d in datasets),
                               datasets, {**at_admission, "span": span}, engine=batch)
            fields: dict[str, Any] = {}
            for controller in controllers:
                fields.update(controller.before_batch(ctx) or {})
            # changes read when a batch runs are in force from the batch that starts now, those the
            # controllers applied in before_batch (a Flumina rescale) included
            changes = self.changelog.take(BATCH)
            try:
                out_rows, run_fields = self.placement.run_batch(ctx, settings.output_dir)
            except Exception as exc:
                # a controller that undoes the change the batch failed under lets it run again, once
                undone = [c for c in controllers if getattr(c, "on_batch_failed", lambda *_: False)(ctx, exc)]
                if not undone:
                    raise
                out_rows, run_fields = self.placement.run_batch(ctx, settings.output_dir)
            fields.update(run_fields)
        except BaseException as exc:
            with self.lock:
                self.book.complete(None)
                self.failure = exc
                self.batch_done.notify_all()
            raise
        record = self._record(batch.batch_id, started, span, admission, datasets, out_rows,
                              [*at_admission.get("changes", ()), *changes], settings, fields)
        record = apply_after_batch(controllers, record)
        self.changelog.stamp(batch.batch_id, changes)
        as_dict = record.to_dict()
        self.sink(as_dict)
        with self.lock:
            self.book.complete(span)
            self._records.append(as_dict)
            self.batches_done += 1
            self.rows_done += int(as_dict.get("rows") or 0)
            callbacks = list(self._callbacks)
            self.batch_done.notify_all()
        self.after_batch()
        for callback in callbacks:
            try:
                callback(as_dict)
            except Exception:  # noqa: BLE001, S110
                pass  # a broken subscriber must not fail the batch
        return as_dict

    def _record(self, batch_id: int, started: float, span, admission, datasets: Sequence[Any], out_rows: int,
                changes: Sequence[Any], settings: BatchSettings, fields: dict) -> BatchRecord:
        completed = self.clock()
        decision = admission.fields.get("decision") if admission else None
        return BatchRecord.from_batch(
            batch_id=batch_id,
            policy=admission.policy if admission and admission.policy else settings.policy,
            datasets=datasets,
            admitted_at=admission.admitted_at if admission else started,
            completed_at=completed,
            bound_s=settings.bound_s,
            changes=[c.to_dict() for c in changes],
            workload=settings.workload,
            start_seq=span[0] if span else None,
            end_seq=span[1] if span else None,
            batch_started_at=started,
            foreach_s=completed - started,
            output_rows=out_rows,
            decision_s=admission.decision_s if admission else 0.0,
            polls=admission.polls if admission else 0,
            decision_reason=admission.reason if admission else None,
            target_s=decision.target_s if decision else settings.target_s,
            predicted_s=decision.predicted_s if decision else None,
            margin_s=decision.margin_s if decision else None,
            estimate_s=decision.estimate_s if decision else None,
            **fields,
        )
