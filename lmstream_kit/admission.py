"""The admission book: which spool offsets were admitted, planned, replayed and completed.

Pure bookkeeping behind the source's ``latestOffset``/plan callbacks and the sink;
the run loop holds its lock.  No Spark here, so it is tested on plain numbers.

>>> book = AdmissionBook()
>>> book.resume(resume=None, committed=None)
>>> book.polled(0.001); book.admit(0, end=3, admitted_at=1.0, reason="bound")
3
>>> book.planned(0, 3); book.begin_batch()
((0, 3), Admission(start=0, end=3, admitted_at=1.0, reason='bound', fields={}, policy=None, polls=1, decision_s=0.001))
>>> book.complete((0, 3)); book.completed_end, book.caught_up(3)
(3, True)
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DRAIN", "HOLD", "RUN", "Admission", "AdmissionBook"]

RUN, DRAIN, HOLD = "run", "drain", "hold"


@dataclass
class Admission:
    """One admitted span of spool datasets, and what the gate and the controllers said about it."""

    start: int
    end: int
    admitted_at: float
    reason: str = ""  # the decision's reason, or "drain" / "replay" without one
    fields: Mapping[str, Any] = field(default_factory=dict)  # carried from admission to the batch
    policy: str | None = None  # the policy that admitted it
    polls: int = 0
    decision_s: float = 0.0


class AdmissionBook:
    """Offsets of one stream: admitted up to ``admitted_end``, processed up to ``completed_end``.

    ``mode`` is ``run`` (the gate decides), ``drain`` (admit everything) or
    ``hold`` (admit nothing: a restart or a stop is under way).
    """

    def __init__(self) -> None:
        self.mode = RUN
        self.admitted_end = 0
        self.completed_end = 0
        self.in_batch = False
        self.initial: int | None = None  # where the query started, once Spark asked (see initial_offset)
        self._admissions: dict[int, Admission] = {}
        self._planned: deque = deque()
        self._polls = 0
        self._decision_s = 0.0

    def resume(self, *, resume: int | None, committed: int | None, now: float = 0.0, start: int = 0) -> None:
        """Start from a checkpoint: Spark replays ``committed..resume`` first, without asking the source.

        Without one (``resume`` None) the query starts at ``start``: the spool's first dataset
        that still has its data (retention may have deleted those before).
        """
        self.initial = None
        self.admitted_end = start if resume is None else resume
        self.completed_end = start if committed is None else committed
        if resume is not None and resume > (committed or 0):
            self._planned.append((committed or 0, resume))
            self._admissions[resume] = Admission(committed or 0, resume, now, reason="replay")

    def initial_offset(self) -> int:
        """Where a query without a checkpoint starts: what was admitted when Spark first asked.

        Asked again (PySpark 4.3 asks once more when it plans the first batch), the answer stays
        the same: had it moved to the end of the first admission, that batch would plan as empty.

        >>> book = AdmissionBook(); book.initial_offset()
        0
        >>> book.admit(0, end=3, admitted_at=1.0, reason="bound"); book.initial_offset()
        3
        0
        """
        if self.initial is None:
            self.initial = self.admitted_end
        return self.initial

    def base(self, start: int | None) -> int:
        """The offset Spark asks from (``start``), or the last admitted one."""
        self.admitted_end = self.admitted_end if start is None else int(start)
        return self.admitted_end

    def polled(self, decision_s: float) -> None:
        """Count one poll of the gate that took ``decision_s`` seconds."""
        self._decision_s += decision_s
        self._polls += 1

    def admit(self, start: int, *, end: int, admitted_at: float, reason: str,
              fields: Mapping[str, Any] | None = None, policy: str | None = None) -> int:
        """Admit ``start..end``; the polls since the last admission go with it. Returns ``end``."""
        self._admissions[end] = Admission(start, end, admitted_at, reason, dict(fields or {}), policy,
                                          self._polls, self._decision_s)
        self._polls, self._decision_s = 0, 0.0
        self.admitted_end = end
        return end

    def planned(self, start: int, end: int, now: float = 0.0, fields: Mapping[str, Any] | None = None) -> None:
        """Spark planned ``start..end``: an admission, or a batch replayed from the offset log.

        ``fields`` (how it was planned) join the admission's fields, which the batch sees.
        """
        self._planned.append((start, end))
        if end not in self._admissions and end > start:
            self._admissions[end] = Admission(start, end, now, reason="replay")
        if fields and end in self._admissions:
            self._admissions[end].fields.update(fields)
        self.admitted_end = max(self.admitted_end, end)

    def begin_batch(self) -> tuple[tuple[int, int] | None, Admission | None]:
        """The span of the batch that starts now, and its admission (None for a no-data batch)."""
        self.in_batch = True
        span = None
        while self._planned:
            start, end = self._planned.popleft()
            if end > self.completed_end or (start == end == self.completed_end):
                span = (start, end)
        admission = self._admissions.pop(span[1], None) if span and span[1] > span[0] else None
        return span, admission

    def complete(self, span: tuple[int, int] | None) -> None:
        """The batch of ``span`` is done (or failed: ``span`` None keeps the offsets)."""
        if span:
            self.completed_end = max(self.completed_end, span[1])
        self.in_batch = False

    def forget_planned(self) -> None:
        """The query restarts: Spark plans again from its checkpoint (or a new query from ``initial_offset``)."""
        self._planned.clear()
        self.initial = None

    def caught_up(self, end_seq: int) -> bool:
        """Whether every dataset before ``end_seq`` was processed."""
        return self.completed_end >= end_seq

    def settled(self) -> bool:
        """Whether everything admitted was processed and no batch is running."""
        return self.completed_end >= self.admitted_end and not self.in_batch
