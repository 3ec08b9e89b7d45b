"""What the report's tables, claims and pages share: the Table IV time components and the captions.

The frame helpers, orders, colours and pass share live in :mod:`lmstream_kit.plots.frames`.

>>> _ordered(["fixed", "mine", None, "lmstream", "fixed"], POLICY_ORDER)
['lmstream', 'fixed', 'mine']
"""

from __future__ import annotations

from collections.abc import Mapping

from ..plots.frames import (  # noqa: F401  (the report's modules import them from here)
    PASS_SHARE,
    POLICY_COLORS,
    POLICY_ORDER,
    TRAFFIC_ORDER,
    _empty,
    _finite,
    _keys,
    _mean_over_reps,
    _num,
    _ordered,
    _policies,
    _traffics,
)

#: Table IV: the five time components (results column -> label)
TIME_COMPONENTS = {
    "buffering_s": "buffering",
    "decision_s": "decision",
    "mapping_s": "device mapping",
    "processing_s": "processing",
    "optimizer_s": "blocked on optimizer",
}
#: the components LMStream adds to the plain micro-batch model (the paper's gray rows)
OVERHEAD_COMPONENTS = ("decision", "device mapping", "blocked on optimizer")


CAPTIONS = {
    "fig1": (
        "Paper Fig. 1 — under the fixed trigger (the paper's throughput-oriented Baseline) the "
        "maximum latency per micro-batch grows over time, and so does the batch size; dashed lines "
        "are each query's latency bound. Drawn from the overload cells (bench --overload) where the "
        "sweep has them, with lmstream's batches at the same load as dotted lines."
    ),
    "fig6": (
        "Paper Fig. 6 — average end-to-end latency per query and policy (mean over repetitions; "
        "error bars: standard deviation), one panel per traffic kind."
    ),
    "fig7": (
        "Paper Fig. 7 — throughput (rows per second of processing) per query and policy "
        "(mean over repetitions; error bars: standard deviation), one panel per traffic kind."
    ),
    "fig8": (
        "Paper Fig. 8 — sliding window: (a) maximum latency per micro-batch with the bound "
        "(the slide), (b) rows per micro-batch, per policy."
    ),
    "fig9": (
        "Paper Fig. 9 — tumbling window: (a) maximum latency per micro-batch with the bound "
        "(the range), (b) rows per micro-batch, per policy."
    ),
    "capacity": (
        "Capacity (not in the paper) — the highest offered rate (rows per simulated second) at "
        f"which at least {PASS_SHARE:.0%} of micro-batches met the latency bound, per query and policy, "
        "as a bracket from the highest rate that passed to the lowest that failed; a rate's verdict is "
        "most of its runs' (a tie runs once more; a bench from before repeated probes ran each rate once), "
        "or where the bench pooled them (capacity_min_batches, 20 by default since 2026-11-28) the share "
        "over all their batches, a fail needing at least that many (one late batch among fewer runs again). "
        "Bracketed: within 10%, each bound run at least twice (the bench's seed, then seed + 1); "
        "open: no rate up to the search's maximum failed; not converged: the probe limit or the time "
        "budget stopped the search first; none passed: every probed rate failed. A ratio is the range "
        "its two brackets allow. A note says where a run at the failing rate failed by a single batch "
        "over the bound: a run of under 20 batches (a policy that makes few large batches, a tumbling "
        "window's) fails the 95% rule with one."
    ),
    "row_cost": (
        "What a row costs by batch size (not in the paper) — each micro-batch's processing seconds per "
        "million rows against its rows, per query, every cell of the sweep pooled (its loads, traffic kinds "
        "and repetitions). Where the points fall as batches grow, a batch's fixed cost spreads over more rows "
        "and batching buys speed; where they lie flat, larger batches process rows no faster, and a policy "
        "that waits for them only spends the bound's slack: near capacity that slack is what absorbs a slow "
        "batch or a collector pause."
    ),
    "table4": (
        "Paper Table IV — share of each time component in their sum under the lmstream policy "
        "(percent, summed over repetitions and traffic). Device mapping (looking up the query's plan, "
        "mapping its operators to devices and applying that plan) and blocking on the inflection-point "
        "optimizer are timed in every data batch; both are spent inside the batch's processing, whose "
        "share here leaves them out."
    ),
    "cpu": (
        "CPU seconds per million rows at the same offered load (mean over repetitions), split into "
        "the Spark JVM, the Python workers and the kit; vs_asap is the ratio to the asap policy."
    ),
    "claims": "The paper's headline claims beside this sweep's numbers.",
    "goals": (
        "The kit's own goals for the lmstream controller (issue 15), beyond the paper's claims: each "
        "says what it asks, what this bench measured where it was worst, and by how much a goal is missed."
    ),
    "at_capacity": (
        "Every policy once per query at a share of asap's measured capacity (bench --at-capacity; its "
        "highest rate that passed), constant traffic: where the bound matters most."
    ),
    "results": "Every sweep cell and repetition, as measured.",
}


def split_load(frame, load: str = "overload"):
    """``(sweep, cells)``: the rows of the sweep's cells and of its cells at ``load`` (the ``load``
    column: ``overload``, or ``capacity`` for the cells at a share of asap's capacity).

    >>> import pandas as pd
    >>> frame = pd.DataFrame({"load": ["sweep", "overload", "sweep", "capacity"]})
    >>> sweep, over = split_load(frame)
    >>> len(sweep), len(over), len(split_load(frame, "capacity")[1]), len(split_load(pd.DataFrame({"x": [1]}))[1])
    (2, 1, 1, 0)
    """
    import pandas as pd

    if frame is None or getattr(frame, "empty", True) or "load" not in frame.columns:
        return frame, pd.DataFrame()
    loads = frame["load"].fillna("sweep")
    return frame[loads == "sweep"].reset_index(drop=True), frame[loads == load].reset_index(drop=True)


def table4_caption(meta: Mapping | None) -> str:
    """Table IV's caption, which says so when the sweep was run before the device mapper existed.

    Such a sweep's ``bench.json`` configuration has no ``device_mode``.

    >>> table4_caption({"config": {"queries": ["LR2S"]}}).endswith("both are 0 in it.")
    True
    >>> table4_caption({"config": {"device_mode": "advisory"}}) == CAPTIONS["table4"]
    True
    """
    config = (meta or {}).get("config")
    if isinstance(config, Mapping) and "device_mode" not in config:
        return CAPTIONS["table4"] + " This sweep was run before the device mapper existed: both are 0 in it."
    return CAPTIONS["table4"]


# ---------------------------------------------------------------------------------------------
# small helpers
