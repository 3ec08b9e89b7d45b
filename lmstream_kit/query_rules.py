"""Which changes of a streaming query Spark allows on a restart from the same checkpoint.

Spark keeps one state store per stateful operator of the query in its checkpoint, keyed by the
operator's position and holding rows of the operator's key and value schema.  A query restarted
from the checkpoint may change what is stateless (projections, filters, a new sink function), but
it must keep its stateful operators: the same ones, in the same order, with the same key and
state types (Spark's guide, "Recovery Semantics after Changes in a Streaming Query").  Spark
finds a violation only when the restarted query runs its first batch; :func:`forbidden_change`
finds it before anything stops, from the stateful operators of both queries' plans (the engine
reads them: :func:`lmstream_kit.engine.query_change.stateful_operators`).

Plain Python, no Spark.

>>> old = [StatefulOp("aggregate", (("window", "struct<start:timestamp,end:timestamp>"), ("segment", "int")),
...                   ("avg(speed double)", "count(1)"))]
>>> forbidden_change(old, old) is None
True
>>> new = [StatefulOp("aggregate", old[0].keys + (("lane", "int"),), old[0].state)]
>>> print(forbidden_change(old, new))
the grouping keys of the aggregate change from (window, segment) to (window, segment, lane): Spark keeps its state by the old keys
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["StatefulOp", "forbidden_change"]

#: what each kind's keys are called in a message
_KEYS = {"aggregate": "grouping keys", "deduplicate": "deduplication keys", "join": "join keys",
         "state": "grouping keys"}


@dataclass(frozen=True)
class StatefulOp:
    """A stateful operator of a streaming query's plan: its ``kind``, its ``keys`` as ``(name, type)``
    pairs, and its ``state``: what it keeps per key (aggregate functions with their input types, a
    join's type, a state function's state type)."""

    kind: str
    keys: tuple[tuple[str, str], ...] = ()
    state: tuple[str, ...] = ()

    def __str__(self) -> str:
        keys = ", ".join(name for name, _ in self.keys)
        return f"{self.kind}({keys})"


def _names(keys: Sequence[tuple[str, str]]) -> str:
    return "(" + ", ".join(name for name, _ in keys) + ")"


def forbidden_change(old: Sequence[StatefulOp], new: Sequence[StatefulOp]) -> str | None:
    """Why Spark would refuse to restart the query ``old`` as ``new`` from its checkpoint (one line),
    None where the change is allowed.

    >>> agg = StatefulOp("aggregate", (("segment", "int"),), ("avg(speed double)",))
    >>> print(forbidden_change([agg], []))
    the query's stateful operators change from [aggregate(segment)] to []: Spark keeps a state store per operator
    >>> print(forbidden_change([agg], [StatefulOp("aggregate", (("segment", "bigint"),), agg.state)]))
    the grouping keys of the aggregate change type: segment int -> bigint: Spark keeps its state by the old keys
    >>> print(forbidden_change([agg], [StatefulOp("aggregate", agg.keys, ("max(speed double)",))]))
    the aggregate keeps other state: (avg(speed double)) -> (max(speed double)): the checkpoint's state has the old schema
    """
    old, new = list(old), list(new)
    if [o.kind for o in old] != [n.kind for n in new]:
        return (f"the query's stateful operators change from [{', '.join(map(str, old))}] to "
                f"[{', '.join(map(str, new))}]: Spark keeps a state store per operator")
    for i, (o, n) in enumerate(zip(old, new)):
        which = f"the {o.kind}" + (f" (stateful operator {i + 1})" if len(old) > 1 else "")
        keys = _KEYS.get(o.kind, "keys")
        if len(o.keys) != len(n.keys):
            return (f"the {keys} of {which} change from {_names(o.keys)} to {_names(n.keys)}: "
                    "Spark keeps its state by the old keys")
        retyped = [(a, ta, tb) for (a, ta), (_, tb) in zip(o.keys, n.keys) if ta != tb]
        if retyped:
            shown = ", ".join(f"{a} {ta} -> {tb}" for a, ta, tb in retyped)
            return f"the {keys} of {which} change type: {shown}: Spark keeps its state by the old keys"
        if o.state != n.state:
            return (f"{which} keeps other state: ({', '.join(o.state)}) -> ({', '.join(n.state)}): "
                    "the checkpoint's state has the old schema")
    return None
