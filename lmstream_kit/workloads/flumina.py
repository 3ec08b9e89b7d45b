"""A Flumina spec as a workload of the kit: generated events, each micro-batch run in fork/join passes.

:func:`flumina_workload` makes a :class:`~lmstream_kit.workloads.base.Workload` whose query passes the
events through and whose :attr:`~lmstream_kit.workloads.base.Workload.batch_program` runs each
micro-batch with a :class:`~lmstream_kit.flumina.batches.BatchRunner` on Spark (one job per pass, a
task per worker), keeping the workers' states in snapshots under the run directory.  So it runs
under every admission policy, with the usual metrics.

>>> w = flumina_workload("value_barrier", parallelism=2, sync_every=100)
>>> w.name, [f.name for f in w.schema], w.slide_s
('FLUMINA_value_barrier_p2', ['tag', 'ts', 'seq', 'payload'], 10.0)
>>> import numpy as np
>>> w.make_rows(3, 4, np.random.default_rng(0)).to_pydict()["ts"]
[3.0, 3.25, 3.5, 3.75]
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from ..exceptions import ConfigError
from ..flumina.examples import (EXAMPLES, fraud_detection_events, max_temperature_events, outlier_detection_events,
                                page_view_events, value_barrier_events, with_work)
from ..flumina.live import FluminaControl
from ..flumina.tables import PAGE_VIEW, Codec, events_table
from .base import Workload

__all__ = ["FLUMINA_EXAMPLES", "FluminaExample", "flumina_workload"]

class FluminaExample(NamedTuple):
    """An example as a workload: ``events(n, parts, every, seed)``, its payload's Arrow type and codec."""

    events: Callable[[int, int, int, int], list]
    payload_type: pa.DataType
    codec: Codec | None = None


#: the examples that run as workloads
FLUMINA_EXAMPLES: dict[str, FluminaExample] = {
    "value_barrier": FluminaExample(
        lambda n, k, every, seed: value_barrier_events(n, streams=k, barrier_every=every, seed=seed), pa.int64()),
    "max_temperature": FluminaExample(
        lambda n, k, every, seed: max_temperature_events(n, sensors=k, day_every=every, seed=seed), pa.float64()),
    "fraud_detection": FluminaExample(
        lambda n, k, every, seed: fraud_detection_events(n, shards=k, refresh_every=every, seed=seed), pa.int64()),
    "page_view": FluminaExample(
        lambda n, k, every, seed: page_view_events(n, shards=k, update_every=every, seed=seed),
        pa.list_(pa.int64()), PAGE_VIEW),
    "outlier_detection": FluminaExample(
        lambda n, k, every, seed: outlier_detection_events(n, streams=k, retrain_every=every, seed=seed),
        pa.float64()),
}


def flumina_workload(example: str = "value_barrier", *, parallelism: int = 2, shards: int | None = None,
                     sync_every: int = 10_000, bound_s: float = 10.0, work: int = 0, plan=None,
                     name: str | None = None, update: Callable | None = None, logic: str | None = None,
                     migrations: dict | None = None, logics: Mapping[str, Any] | None = None) -> Workload:
    """A workload that runs Flumina ``example`` on ``parallelism`` workers.

    Parameters
    ----------
    example : one of :data:`FLUMINA_EXAMPLES`.
    parallelism : workers of the greedy plan (1: the sequential plan).
    shards : independent input shards (default: ``parallelism``).
    sync_every : about one synchronising event per this many events.
    bound_s : the latency bound (simulated seconds) the admission controller holds.
    work : extra per-event work (:func:`~lmstream_kit.flumina.examples.with_work`).
    plan : a plan of your own instead of the greedy one (a Plan for the example's spec).
    update, logic : an update function of your own instead of the example's, and the name it goes
        by (what :meth:`~lmstream_kit.flumina.live.FluminaControl.set_update` swapped in live: a run
        restarted after the swap is started with it, since its saved state was made by it).
    migrations : ``{logic: transform}`` for a saved state made by another logic
        (:class:`~lmstream_kit.flumina.batches.BatchRunner`).
    logics : ``{name: update}`` or ``{name: (update, transform)}``, optional
        Other update functions of the example's spec, swapped in by name while the stream runs
        (``reconfigure --set flumina.logic=NAME``, or the dashboard's menu); ``transform(state)``
        brings the state of another logic to this one's (None: they share the state's shape).  A
        run restarted after such a swap goes on under the logic its saved state was made by.

    The stream gets a :class:`~lmstream_kit.flumina.live.FluminaControl`, which rescales the
    workers, migrates tags between them and swaps the update function while it runs.
    """
    if example not in FLUMINA_EXAMPLES:
        raise ConfigError(f"unknown Flumina workload example {example!r} (known: {', '.join(FLUMINA_EXAMPLES)})")
    for label, value, low in (("parallelism", parallelism, 1), ("sync_every", sync_every, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigError(f"{label} must be an integer >= {low}, got {value!r}")
    parts = shards or parallelism
    generate, payload_type, codec = FLUMINA_EXAMPLES[example]
    base = EXAMPLES.get(example).spec(parts)
    spec = with_work(base, work)
    from ..flumina.batches import INITIAL_LOGIC

    named: dict[str, tuple] = {INITIAL_LOGIC: (spec, None)}
    for key, value in (logics or {}).items():
        fn, transform = value if isinstance(value, tuple) else (value, None)
        if not isinstance(key, str) or not key or key == INITIAL_LOGIC:
            raise ConfigError(f"a logic's name must be a non-empty string other than {INITIAL_LOGIC!r} (the "
                              f"example's own update), got {key!r}")
        if not callable(fn) or (transform is not None and not callable(transform)):
            raise ConfigError(f"logic {key!r} must be an update function (state, event) -> (state, outputs), or "
                              f"(update, transform), got {value!r}")
        named[key] = (with_work(dataclasses.replace(base, update=fn), work), transform)
    if update is not None:
        if not callable(update):
            raise ConfigError(f"update must be a function (state, event) -> (state, outputs), got {update!r}")
        spec = dataclasses.replace(spec, update=update)
        logic = logic or getattr(update, "__name__", None) or "update"
    logic = str(logic or INITIAL_LOGIC)
    if logic in named and named[logic][0].update is not spec.update:
        if update is not None or logic == INITIAL_LOGIC:
            raise ConfigError(f"logic {logic!r} is declared in logics= too: start with it by its name alone")
        spec = named[logic][0]  # start under one of the declared logics, by name
    named.setdefault(logic, (spec, None))
    if plan is None:
        from ..flumina.plan import greedy_plan, sequential_plan

        plan = sequential_plan(spec) if parallelism == 1 else greedy_plan(spec, parallelism)
    schema = pa.schema([("tag", pa.string()), ("ts", pa.float64()), ("seq", pa.int64()), ("payload", payload_type)])

    def make_rows(second: int, n: int, rng) -> pa.Table:
        events = generate(n, parts, sync_every, int(rng.integers(2**31)))
        table = events_table(events, payload_type, codec=codec, ts=second + np.arange(n) / max(n, 1),
                             seq=second * 10_000_000 + np.arange(n))
        return table.select(schema.names)

    def batch_program(state_dir: Path) -> Callable[[Any, int], tuple[pa.Table, dict]]:
        from ..flumina.batches import BatchRunner

        runner = BatchRunner(spec, plan, snapshots=Path(state_dir), logic=logic, migrations=migrations,
                             logics=named).restore()  # writes the plan for the panel

        def program(batch_df, batch_id: int) -> tuple[pa.Table, dict]:
            from ..engine.flumina import spark_workers

            # no cache between passes: measured, it never paid (docs/flumina.md, "Caching between passes")
            workers = spark_workers(batch_df, codec=codec)
            try:
                pairs = runner.run(batch_id, map_workers=workers)
            finally:
                workers.release()
            table = pa.table({
                "ts": pa.array([float(e.ts) for e, _ in pairs], pa.float64()),
                "tag": pa.array([str(e.tag) for e, _ in pairs], pa.string()),
                "output": pa.array([repr(o) for _, o in pairs], pa.string()),
            })
            last = runner.last
            return table, {"flumina_passes": last.passes, "flumina_epochs": last.epochs,
                           "flumina_events": last.events, "flumina_worker_events": dict(last.worker_events)}

        program.runner = runner  # what the stream's FluminaControl reconfigures
        return program

    return Workload(
        name=name or f"FLUMINA_{example}_p{parallelism}",
        description=f"Flumina {example} on {len(plan.workers)} worker(s), a sync about every {sync_every} events",
        schema=schema, make_rows=make_rows, build_query=lambda stream: stream,
        window_range_s=0.0, slide_s=float(bound_s), output_mode="append", batch_program=batch_program,
        controllers=(functools.partial(FluminaControl, logics=tuple(named)),),
    )
