"""Pre-training from the history: DAGs clustered by graph edit distance, their runs turned into transitions.

StreamTune pre-trains one model per cluster of similar job DAGs.  Here:

* :func:`stage_graph` makes a batch's stages a small labelled graph (networkx ``DiGraph``): a node
  per stage, labelled by its *kind* (``source`` for a job's first stage, which reads the input,
  ``shuffle`` for a stage that reads a shuffle) and its selectivity class (``reduce``: far fewer
  records out than in, ``keep``, ``grow``), an edge per stage that feeds the next (the chain of
  :func:`~lmstream_kit.tune.history.stage_dag`);
* :func:`dag_distance` is the graph edit distance between two such graphs, with node labels that
  must match: exact (networkx's ``graph_edit_distance``) up to :data:`EXACT_LIMIT` nodes, above it
  the first answer of the anytime ``optimize_graph_edit_distance`` (an upper bound);
* :func:`similar_fingerprints` picks, from the history, the DAG fingerprints within ``max_distance``
  of the running query's DAG (its cluster);
* :func:`history_transitions` turns those runs' rows back into
  :class:`~lmstream_kit.tune.predictor.Transition` s, the model's pre-training data.

>>> a = [{"key": "j0.s0", "job": 0, "position": 0, "records_in": 1000, "records_out": 10},
...      {"key": "j0.s1", "job": 0, "position": 1, "records_in": 10, "records_out": 0}]
>>> b = a + [{"key": "j0.s2", "job": 0, "position": 2, "records_in": 10, "records_out": 10}]
>>> dag_distance(stage_graph(a), stage_graph(a)), dag_distance(stage_graph(a), stage_graph(b))
(0.0, 2.0)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .history import SCHEMA, stage_dag
from .operators import OperatorSample
from .predictor import Transition, transitions

__all__ = ["EXACT_LIMIT", "dag_distance", "history_transitions", "similar_fingerprints", "stage_graph"]

#: graphs up to this many nodes get the exact edit distance (NP-hard, fine for small DAGs)
EXACT_LIMIT = 12


def _get(op: Any, name: str, default: Any = None) -> Any:
    return op.get(name, default) if isinstance(op, Mapping) else getattr(op, name, default)


def _selectivity_class(records_in: Any, records_out: Any) -> str:
    i, o = float(records_in or 0), float(records_out or 0)
    if i <= 0:
        return "keep"
    ratio = o / i
    return "reduce" if ratio < 0.5 else ("grow" if ratio > 2 else "keep")


def stage_graph(operators: Iterable[Any]):
    """A batch's stages (record ``operators`` dicts or OperatorSamples) as a labelled DiGraph."""
    import networkx as nx

    ops = list(operators)
    g = nx.DiGraph()
    for op in ops:
        kind = "source" if int(_get(op, "position", 0)) == 0 else "shuffle"
        g.add_node(_get(op, "key"), label=(kind, _selectivity_class(_get(op, "records_in"), _get(op, "records_out"))))
    g.add_edges_from(stage_dag([{"key": _get(o, "key"), "job": _get(o, "job", 0), "position": _get(o, "position", 0)}
                                for o in ops]))
    return g


def dag_distance(g1, g2, *, timeout_s: float = 2.0) -> float:
    """The graph edit distance of two stage graphs (labels must match; unit costs)."""
    import networkx as nx

    def same(a: dict, b: dict) -> bool:
        return a.get("label") == b.get("label")

    if max(g1.number_of_nodes(), g2.number_of_nodes()) <= EXACT_LIMIT:
        d = nx.graph_edit_distance(g1, g2, node_match=same, timeout=timeout_s)
        if d is not None:
            return float(d)
    for d in nx.optimize_graph_edit_distance(g1, g2, node_match=same):
        return float(d)  # the anytime variant's first (upper-bound) answer
    return math.inf


def similar_fingerprints(history, operators: Sequence[Any], *, max_distance: float = 2.0) -> dict[str, float]:
    """``{fingerprint: distance}`` of the history's DAGs within ``max_distance`` of ``operators``' DAG.

    ``history`` is a table of :data:`~lmstream_kit.tune.history.SCHEMA` rows (a pyarrow Table).
    """
    if history is None or history.num_rows == 0:
        return {}
    me = stage_graph(operators)
    out = {}
    for fp, ops in _one_batch_per_fingerprint(history).items():
        d = dag_distance(me, stage_graph(ops))
        if d <= max_distance:
            out[fp] = d
    return out


def _one_batch_per_fingerprint(history) -> dict[str, list[dict]]:
    cols = history.select(["fingerprint", "run_id", "batch_id", "operator", "job", "position", "records_in",
                           "records_out"]).to_pylist()
    first: dict[str, tuple] = {}
    ops: dict[str, list[dict]] = {}
    for row in cols:
        fp, key = row["fingerprint"], (row["run_id"], row["batch_id"])
        if first.setdefault(fp, key) == key:
            ops.setdefault(fp, []).append({"key": row["operator"], **{k: row[k] for k in
                                          ("job", "position", "records_in", "records_out")}})
    return ops


def history_transitions(history, fingerprints: Iterable[str] | None = None, *, split_budget: bool = False,
                        busy_share: float = 0.7) -> list[Transition]:
    """The transitions of every run in ``history`` (restricted to ``fingerprints`` when given; the
    keywords as :func:`~lmstream_kit.tune.predictor.transitions` takes them)."""
    if history is None or history.num_rows == 0:
        return []
    wanted = None if fingerprints is None else set(fingerprints)
    names = [f.name for f in SCHEMA]
    rows = [r for r in history.select(names).to_pylist() if wanted is None or r["fingerprint"] in wanted]
    runs: dict[str, dict[int, list[dict]]] = {}
    for r in rows:
        runs.setdefault(r["run_id"], {}).setdefault(int(r["batch_id"]), []).append(r)
    out: list[Transition] = []
    for batches in runs.values():
        seq = []
        for batch_id in sorted(batches):
            ops = batches[batch_id]
            budget = ops[0]["bound_s"]
            seq.append(([_sample(r) for r in sorted(ops, key=lambda r: (r["job"], r["position"]))],
                        int(ops[0]["batch_rows"] or 0), float(budget) if budget else 0.0))
        out += transitions(seq, split_budget=split_budget, busy_share=busy_share)
    return out


def _sample(r: Mapping[str, Any]) -> OperatorSample:
    return OperatorSample(
        key=r["operator"], job=int(r["job"]), position=int(r["position"]), stage_id=int(r["stage_id"] or -1),
        status=str(r["status"] or ""), tasks=int(r["tasks"]), records_in=int(r["records_in"]),
        records_out=int(r["records_out"]), run_s=float(r["run_s"]), cpu_s=float(r["cpu_s"] or 0.0),
        useful_s=float(r["useful_s"]), wall_s=r["wall_s"], true_rate=r["true_rate"], load=r["load"],
        bottleneck=bool(r["bottleneck"]))
