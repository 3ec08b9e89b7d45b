"""The reconfiguration journal: every live reconfiguration of a stream as a transaction, append-only.

A reconfiguration (a window change, a policy switch, a state repartition, a plain restart) goes

    requested -> prepared -> applied -> committed

or ends ``aborted`` with a reason from any state before ``committed``.  ``prepared``: the stream
is ready to change (the query stopped between batches, the state rewritten); ``applied``: the new
configuration runs (the query started again); ``committed``: the first batch under it completed.
Every step is one line of ``reconfig.jsonl`` in the run directory, fsynced before the stream goes
on, so after a crash at any point the journal says how far each transaction went, and a restart
of the run resolves the open ones (:meth:`Journal.resolve`) to the old configuration or the new
one, never a mix.

>>> import tempfile
>>> j = Journal(tempfile.mkdtemp())
>>> t = j.begin("state_partitions", old=2, value=4)
>>> t.step("prepared", repartition_s=3.1); t.step("applied")
>>> [x["state"] for x in j.transactions()], [x["txn"] for x in j.open()]
(['applied'], [1])
>>> t.step("prepared")
Traceback (most recent call last):
...
lmstream_kit.exceptions.ConfigError: transaction 1 (state_partitions) cannot go from applied to prepared
>>> t.step("committed", batch_id=7); j.open()
[]
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .exceptions import ConfigError
from .metrics import JsonlWriter, read_jsonl

__all__ = ["JOURNAL_FILE", "STEPS", "Journal", "Transaction", "recovery_plan"]

#: the journal's file in the run directory
JOURNAL_FILE = "reconfig.jsonl"
#: a transaction's states, in order; ``aborted`` may follow any but ``committed``
STEPS = ("requested", "prepared", "applied", "committed", "aborted")
_NEXT = {
    "requested": ("prepared", "aborted"),
    "prepared": ("applied", "aborted"),
    "applied": ("committed", "aborted"),
}


class Transaction:
    """One reconfiguration in the journal: :meth:`step` writes its next state."""

    def __init__(self, journal: Journal, txn: int, op: str, state: str = "requested") -> None:
        self.journal, self.txn, self.op, self.state = journal, txn, op, state

    def step(self, state: str, **detail: Any) -> None:
        """Write the transaction's next ``state`` (see :data:`STEPS`) with ``detail``; durable on return."""
        if state not in _NEXT.get(self.state, ()):
            raise ConfigError(f"transaction {self.txn} ({self.op}) cannot go from {self.state} to {state}")
        self.journal._write({"txn": self.txn, "op": self.op, "state": state, **detail})
        self.state = state

    def abort(self, reason: str, **detail: Any) -> None:
        """End the transaction as ``aborted`` with ``reason`` (one line)."""
        self.step("aborted", reason=reason, **detail)

    def __repr__(self) -> str:
        return f"Transaction({self.txn}, {self.op!r}, {self.state!r})"


class Journal:
    """The append-only journal of a run directory (:data:`JOURNAL_FILE`); thread-safe."""

    def __init__(self, run_dir: str | Path) -> None:
        self.path = Path(run_dir) / JOURNAL_FILE
        self._lock = threading.Lock()
        self._writer: JsonlWriter | None = None
        self._last = max((int(e.get("txn", 0)) for e in read_jsonl(self.path)), default=0)

    def _write(self, entry: Mapping[str, Any]) -> None:
        with self._lock:
            if self._writer is None:
                self._writer = JsonlWriter(self.path, durable=True)
            self._writer.append({**entry, "at": time.time()})

    def begin(self, op: str, **params: Any) -> Transaction:
        """A new transaction for ``op``, written as ``requested`` with ``params`` (old, value, ...)."""
        with self._lock:
            self._last += 1
            txn = self._last
        self._write({"txn": txn, "op": op, "state": "requested", **params})
        return Transaction(self, txn, op)

    def entries(self) -> list[dict]:
        """Every line of the journal, oldest first (a line a crash cut short is skipped)."""
        return read_jsonl(self.path)

    def transactions(self) -> list[dict]:
        """One dict per transaction, oldest first: its ``txn``, ``op``, last ``state``, the request's
        fields, the time of each step (``<state>_at``) and every step's detail merged in."""
        out: dict[int, dict] = {}
        for e in self.entries():
            txn = int(e["txn"])
            row = out.setdefault(txn, {"txn": txn, "op": e.get("op")})
            row.update({k: v for k, v in e.items() if k not in ("txn", "op", "at")})
            row[f"{e['state']}_at"] = e.get("at")
        return list(out.values())

    def committed(self) -> dict[str, dict]:
        """The last committed transaction of each op, ``{op: transaction}``, in the order they committed
        (what a run restored from the journal takes: :meth:`LiveStream.start` with ``restore_config``)."""
        done = [t for t in self.transactions() if t["state"] == "committed"]
        done.sort(key=lambda t: t.get("committed_at") or 0.0)
        last: dict[str, dict] = {}
        for t in done:
            last.pop(t["op"], None)  # re-inserted: the dict keeps the order of the last commits
            last[t["op"]] = t
        return last

    def open(self) -> list[dict]:
        """The transactions that neither committed nor aborted (after a crash: the ones to resolve)."""
        return [t for t in self.transactions() if t["state"] not in ("committed", "aborted")]

    def resolve(self, resolution: Mapping[int, tuple[str, str]]) -> None:
        """End open transactions after a crash: ``{txn: ("committed" | "aborted", why)}``.

        A transaction whose new configuration is in force is committed, one whose old
        configuration is in force is aborted; either way the entry says ``recovered`` and why.
        """
        for t in self.open():
            if t["txn"] not in resolution:
                continue
            state, why = resolution[t["txn"]]
            if state not in ("committed", "aborted"):
                raise ConfigError(f"a recovered transaction ends committed or aborted, got {state!r}")
            self._write({"txn": t["txn"], "op": t["op"], "state": state, "recovered": True,
                         **({"reason": why} if state == "aborted" else {"how": why})})

    def close(self) -> None:
        with self._lock:
            if self._writer is not None:
                self._writer.close()
                self._writer = None


def recovery_plan(open_txns: list[Mapping[str, Any]], *, state_partitions: int | None,
                  rolled_back: Mapping[str, Any] | None,
                  in_force: Mapping[str, Any] | None = None) -> dict[int, tuple[str, str]]:
    """How a restarted run ends the transactions a crash left open (for :meth:`Journal.resolve`).

    A state repartition's outcome is in the checkpoint: committed where the state is in the
    requested partitions, aborted where it is not (``rolled_back``: the unfinished repartition the
    start removed).  A window, policy or plain restart lives in the running process: the resumed
    run takes the configuration it is started with, and Spark replays any batch the crash cut
    short under it, so these are aborted.  ``in_force`` names, by op, what the restarted run has
    in force (a Flumina program's logic and workers): a change of such an op is committed where its
    new value is in force, aborted where it is not.

    >>> recovery_plan([{"txn": 3, "op": "state_partitions", "old": 2, "value": 4, "state": "prepared"}],
    ...               state_partitions=2, rolled_back={"batch": 9, "requested": 4, "kept": 2})
    {3: ('aborted', 'the run stopped during the repartition into 4 partitions: batch 9 rolled back, the state stays in 2')}
    >>> recovery_plan([{"txn": 4, "op": "state_partitions", "old": 2, "value": 4, "state": "prepared"},
    ...                {"txn": 5, "op": "window_slide_s", "old": 10, "value": 5, "state": "applied"}],
    ...               state_partitions=4, rolled_back=None)[4]
    ('committed', 'the checkpoint keeps the state in 4 partitions')
    >>> recovery_plan([{"txn": 6, "op": "flumina_logic", "old": "initial", "value": "v2", "state": "applied"}],
    ...               state_partitions=None, rolled_back=None, in_force={"flumina_logic": "v2"})
    {6: ('committed', "the restarted run has flumina_logic = 'v2' in force")}
    >>> recovery_plan([{"txn": 7, "op": "flumina_logic", "old": "initial", "value": "v2", "state": "prepared"}],
    ...               state_partitions=None, rolled_back=None, in_force={"flumina_logic": "initial"})[7][1]
    "the run stopped in prepared before the change of flumina_logic to 'v2' committed: the restarted run has flumina_logic = 'initial' in force"
    """
    plan: dict[int, tuple[str, str]] = {}
    for t in open_txns:
        txn, op, value = int(t["txn"]), t.get("op"), t.get("value")
        if op == "state_partitions":
            if rolled_back is not None:
                plan[txn] = ("aborted", f"the run stopped during the repartition into {value} partitions: batch "
                                        f"{rolled_back.get('batch')} rolled back, the state stays in {rolled_back.get('kept')}")
            elif state_partitions == value:
                plan[txn] = ("committed", f"the checkpoint keeps the state in {value} partitions")
            else:
                plan[txn] = ("aborted", f"the run stopped before the repartition into {value} partitions: the state "
                                        f"stays in {state_partitions}")
        elif op in (in_force or {}) and in_force[op] == value:
            plan[txn] = ("committed", f"the restarted run has {op} = {value!r} in force")
        elif op in (in_force or {}):
            plan[txn] = ("aborted", f"the run stopped in {t.get('state')} before the change of {op} to {value!r} "
                                    f"committed: the restarted run has {op} = {in_force[op]!r} in force")
        else:
            plan[txn] = ("aborted", f"the run stopped in {t.get('state')} before the change of {op} to {value!r} "
                                    "committed: it resumes with the configuration it is started with")
    return plan
