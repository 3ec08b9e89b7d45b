"""Where the dashboard's records come from: a live stream's ``on_batch`` or a run directory.

:class:`RecordBuffer` holds them, one per batch id, and may be filled from any thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from lmstream_kit.exceptions import ConfigError
from lmstream_kit.metrics import METRICS_FILE, read_journal, read_run_info

__all__ = ["RecordBuffer", "attach_live", "detach_live", "load_run"]


class RecordBuffer:
    """Records by batch id (the newest record of a batch id wins), pushed from any thread.

    :meth:`push` only buffers a record, sets :attr:`dirty` and notifies
    :attr:`changed` (a condition on :attr:`lock`); buffered records are merged
    when read.  After :meth:`close`, :meth:`push` does nothing.  :attr:`lock`
    also guards the redraw state (:class:`widgets.redraw.Redraw`).

    A live buffer keeps the newest ``kept`` batches (the figures of a stream that runs for days
    show its latest ones; the run's ``metrics.jsonl`` has them all); a replay (:meth:`load`)
    keeps the whole run.
    """

    #: batches a live buffer keeps, as many as the stream itself keeps in memory
    KEPT = 1000

    def __init__(self, kept: int | None = KEPT) -> None:
        self.kept = kept
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)  # notified on a new record and on close
        self.dirty = False  # records pushed since the last redraw took them
        self.closed = False
        self._by_id: dict[int, dict] = {}
        self._pending: list[dict] = []

    def push(self, record: dict) -> None:
        """The ``on_batch`` callback (Spark's thread): buffer the record and wake the redraw thread."""
        with self.lock:
            if self.closed:
                return
            self._pending.append(record)
            self.dirty = True
            self.changed.notify_all()

    def close(self) -> bool:
        """Take no more records and wake every waiter; False when already closed."""
        with self.lock:
            if self.closed:
                return False
            self.closed = True
            self.changed.notify_all()
            return True

    def merge_locked(self) -> None:
        """Move the pending records into ``_by_id`` (the newest record of a batch id wins)."""
        for record in self._pending:
            try:
                self._by_id[int(record["batch_id"])] = dict(record)
            except (KeyError, TypeError, ValueError):
                continue  # not a batch record
        self._pending.clear()
        self._trim_locked()

    def _trim_locked(self) -> None:
        # in steps of a tenth, so that the sort runs once per kept/10 batches, not every batch
        if self.kept is not None and len(self._by_id) > self.kept + self.kept // 10:
            for batch_id in sorted(self._by_id)[: len(self._by_id) - self.kept]:
                del self._by_id[batch_id]

    def records(self) -> list[dict]:
        """Every record, sorted by batch id; one per batch id."""
        with self.lock:
            self.merge_locked()
            return [self._by_id[b] for b in sorted(self._by_id)]

    def batch_ids(self) -> list[int]:
        """The batch ids merged so far, sorted."""
        return sorted(self._by_id)

    def load(self, records: Iterable[Mapping]) -> None:
        """Merge ``records`` now (a run's metrics file); records without a batch id are skipped."""
        with self.lock:
            self.kept = None  # a replay holds the whole run
            self._pending.extend(records)
            self.merge_locked()

    def seed(self, records: Iterable[Mapping]) -> None:
        """Take the records a stream already has (after registering the callback: none is missed)."""
        with self.lock:
            for record in records:
                self._by_id[int(record["batch_id"])] = dict(record)
            self._trim_locked()


def attach_live(stream: Any, buffer: RecordBuffer) -> Callable[[dict], None]:
    """Register ``buffer.push`` with ``stream.on_batch``, then take the stream's records so far.

    Returns the registered callback, for :func:`detach_live`.
    """
    callback = buffer.push
    stream.on_batch(callback)
    buffer.seed(stream.records)  # after registering: no batch falls in between
    return callback


def detach_live(stream: Any, callback: Callable[[dict], None]) -> None:
    """Unregister ``callback`` from ``stream`` where the stream can (never raises)."""
    try:
        stream.remove_on_batch(callback)
    except Exception:
        pass  # the callback is a no-op from now on anyway


def load_run(run_dir: Path, buffer: RecordBuffer) -> dict:
    """Load ``metrics.jsonl`` of ``run_dir`` (its rotated parts too) into ``buffer``; returns its ``run.json``.

    Raises :class:`ConfigError` when the directory is missing or has no metrics.
    """
    path = run_dir / METRICS_FILE
    if not run_dir.is_dir():
        raise ConfigError(f"run directory {run_dir} does not exist")
    buffer.load(read_journal(path))
    if not buffer.batch_ids():
        raise ConfigError(f"run directory {run_dir} has no metrics ({METRICS_FILE} missing or empty)")
    return read_run_info(run_dir)

