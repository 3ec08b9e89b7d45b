"""Flumina's workers on Spark: one Spark job per pass over a micro-batch, one partition per worker.

:func:`spark_workers` is a :data:`~lmstream_kit.flumina.speculate.MapWorkers` for a micro-batch
DataFrame with columns ``tag``, ``ts`` (seconds, or a timestamp), an optional ``payload`` and an
optional arrival-order column (``seq``).  Each event goes to the worker that owns its tag, a
synchronising event to every worker under its node; the rows are hash-partitioned on a key chosen so
that Spark's own partitioner puts worker ``i`` in partition ``i``, sorted within the partition, and
one ``mapInArrow`` task per worker runs :func:`~lmstream_kit.flumina.speculate.run_worker` on them.
Spark does the distribution; the driver only checks the forks (:func:`~.speculate.resolve`).

:func:`spark_sequential` is what a Spark user writes otherwise: the whole batch in one partition
(``coalesce(1)``) or under one global key (``groupBy(lit(0))``), one loop over the events.
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from ..exceptions import ConfigError, EngineError, error_line, one_line

__all__ = ["events_frame", "partition_keys", "spark_sequential", "spark_workers", "warm_workers", "worker_frame"]


@lru_cache(maxsize=16)
def _keys(spark, n: int) -> tuple[int, ...]:
    from pyspark.sql import functions as F

    rows = spark.range(0, 64 * n).select("id", F.pmod(F.hash("id"), F.lit(n)).alias("p")).collect()
    first: dict[int, int] = {}
    for row in rows:
        first.setdefault(int(row.p), int(row.id))
    if len(first) < n:
        raise EngineError(f"found no hash key for every one of {n} partitions")
    return tuple(first[i] for i in range(n))


def partition_keys(spark, n: int) -> tuple[int, ...]:
    """Keys ``k_0..k_{n-1}`` that Spark's hash partitioner sends to partitions ``0..n-1`` (asked of Spark)."""
    return _keys(spark, int(n))


def _order_columns(df, seq: str | None) -> list[str]:
    return ["_ts"] + ([seq] if seq and seq in df.columns else [])


def worker_frame(batch_df, plan, *, seq: str | None = "seq"):
    """The batch's events, each on the partition of the worker that runs it, in the sequential order.

    Columns ``tag``, ``_ts`` (seconds, a double), ``payload`` (None where absent) and ``_w`` (the
    worker's index in the plan).  A synchronising event is on every worker under its node; an event
    of a tag the plan does not know goes to worker 0, which reports it.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import TimestampNTZType, TimestampType

    missing = [c for c in ("tag", "ts") if c not in batch_df.columns]
    if missing:
        raise ConfigError(f"a Flumina micro-batch needs columns tag and ts; missing {', '.join(missing)}")
    names = [w.name for w in plan.workers]
    index = {name: i for i, name in enumerate(names)}
    pairs = []
    for tag in sorted(plan.spec.tags, key=repr):
        owner = plan.owner(tag)
        targets = [index[owner]] if owner in index else [index[w] for w in plan.leaves_under(owner)]
        pairs += [F.lit(tag), F.array(*[F.lit(i) for i in targets])]
    ts_type = batch_df.schema["ts"].dataType
    ts = F.col("ts")
    ts = F.unix_micros(ts.cast("timestamp")) / 1e6 if isinstance(ts_type, (TimestampType, TimestampNTZType)) \
        else ts.cast("double")
    payload = F.col("payload") if "payload" in batch_df.columns else F.lit(None)
    keys = partition_keys(batch_df.sparkSession, len(names))
    extra = [seq] if seq and seq in batch_df.columns else []
    framed = batch_df.select(
        "tag", ts.alias("_ts"), payload.alias("payload"), *extra,
        F.explode(F.coalesce(F.element_at(F.create_map(*pairs), F.col("tag")), F.array(F.lit(0)))).alias("_w"),
    )
    framed = framed.withColumn("_k", F.element_at(F.array(*[F.lit(k).cast("bigint") for k in keys]), F.col("_w") + 1))
    return framed.repartition(len(names), "_k").sortWithinPartitions(*_order_columns(framed, seq))


def spark_workers(batch_df, *, seq: str | None = "seq", codec=None, cache: bool = False):
    """A MapWorkers that runs each pass over ``batch_df`` as one Spark job, a task per worker.

    The plan's workers must all run at once only in the sense that each is one task; a machine with
    fewer cores runs them one after another (correct, just not parallel).  ``codec``
    (:class:`~lmstream_kit.flumina.tables.Codec`) decodes the payload column.  ``cache``: keep the
    routed, sorted events in Spark's memory after the first pass, so that later passes of the batch
    read them instead of reading and shuffling the batch again (worth it for a spec that needs more
    than one pass; the returned function's ``release()`` unpersists them).
    """
    from ..flumina.spec import Event
    from ..flumina.speculate import run_worker

    frames: dict = {}

    def run(spec, plan, tasks: Sequence) -> dict:
        import pyarrow as pa

        key = plan.to_dict().__repr__()
        if key not in frames:
            release()
            frames[key] = worker_frame(batch_df, plan, seq=seq)
            if cache:
                frames[key].persist()
        framed = frames[key]
        names = [w.name for w in plan.workers]
        by_worker = {t.worker: t for t in tasks}

        def work(batches):
            from pyspark import TaskContext

            i = TaskContext.get().partitionId()
            task = by_worker[names[i]]

            def events():
                for b in batches:
                    workers = b.column("_w").to_pylist()
                    if any(w != i for w in workers):
                        raise RuntimeError(f"partition {i} holds events of worker {[w for w in workers if w != i][0]}")
                    payloads = b.column("payload").to_pylist()
                    if decode is not None:
                        payloads = [decode(p) for p in payloads]
                    for tag, ts, payload in zip(b.column("tag").to_pylist(), b.column("_ts").to_pylist(), payloads):
                        yield Event(tag, ts, payload)

            report = run_worker(spec, plan, task, events())
            yield pa.RecordBatch.from_pydict({"worker": [names[i]], "report": [pickle.dumps(report)]})

        try:
            rows = framed.mapInArrow(work, "worker STRING, report BINARY").collect()
        except Exception as exc:
            raise EngineError(f"Flumina pass on Spark failed: {_task_error(exc)}") from exc
        if not rows:  # an empty batch: Spark's optimizer runs no task at all
            return {t.worker: run_worker(spec, plan, t, []) for t in tasks}
        return {row.worker: pickle.loads(row.report) for row in rows}

    def release() -> None:
        for frame in frames.values():
            if cache:
                frame.unpersist()
        frames.clear()

    decode = codec.decode if codec is not None else None
    run.release = release
    return run


def _warm_task(batches):
    """One task of :func:`warm_workers`: load what a pass's task loads, and overlap with the others."""
    import time

    import pyarrow as pa

    from ..flumina import spec, speculate  # noqa: F401  (what a pass's task unpickles)

    for _ in batches:
        pass
    time.sleep(0.05)  # the tasks overlap, so that each one is given a Python worker of its own
    yield pa.RecordBatch.from_pydict({"ok": [1]})


def warm_workers(spark, n: int) -> float:
    """Get Spark ready for passes on ``n`` workers before a rescale: returns the seconds it took.

    The partition keys for ``n`` partitions (a Spark job, cached) and ``n`` Python workers that have
    loaded the modules a pass's task needs: Spark forks a Python worker for a task when none is
    idle, and its first task imports them.  Without this, the first batch on the new plan pays for
    both.
    """
    import time

    t0 = time.perf_counter()
    partition_keys(spark, int(n))
    spark.range(0, int(n), 1, int(n)).mapInArrow(_warm_task, "ok BIGINT").collect()
    return time.perf_counter() - t0


def _task_error(exc: BaseException) -> str:
    """The Python error a task raised (its last line), else the exception's first line."""
    text = error_line(exc)
    return text if not text.startswith(f"{type(exc).__name__}: ") else one_line(exc)


def spark_sequential(batch_df, spec, *, state: Any = None, idiom: str = "coalesce", seq: str | None = "seq",
                     codec=None):
    """The batch as a Spark user runs it without Flumina: every event in one place, in order.

    ``idiom``: ``"coalesce"`` (``coalesce(1)``, sorted in the partition) or ``"global_key"``
    (a constant key, ``groupBy(key).applyInArrow``, sorted in the group); ``codec`` decodes the
    payload column.  Returns ``(state, outputs)`` like
    :func:`~lmstream_kit.flumina.spec.run_sequential`.
    """
    import pyarrow as pa
    from pyspark.sql import functions as F

    from ..flumina.spec import Event

    start = spec.init() if state is None else state
    cols = ["tag", "ts"] + (["payload"] if "payload" in batch_df.columns else []) \
        + ([seq] if seq and seq in batch_df.columns else [])
    df = batch_df.select(*cols)
    order = ["ts"] + ([seq] if seq and seq in batch_df.columns else [])

    def loop(table) -> bytes:
        s, outputs = start, []
        payloads = table.column("payload").to_pylist() if "payload" in table.column_names else [None] * table.num_rows
        if codec is not None:
            payloads = [codec.decode(p) for p in payloads]
        for tag, ts, payload in zip(table.column("tag").to_pylist(), table.column("ts").to_pylist(), payloads):
            s, out = spec.update(s, Event(tag, ts, payload))
            outputs.extend(out)
        return pickle.dumps((s, outputs))

    if idiom == "coalesce":
        def work(batches):
            table = pa.Table.from_batches(list(batches))
            yield pa.RecordBatch.from_pydict({"result": [loop(table)]})
        try:
            rows = df.coalesce(1).sortWithinPartitions(*order).mapInArrow(work, "result BINARY").collect()
        except Exception as exc:
            raise EngineError(f"sequential run on Spark failed: {_task_error(exc)}") from exc
    elif idiom == "global_key":
        def group(table):
            table = table.sort_by([(c, "ascending") for c in order])
            return pa.table({"result": [loop(table)]})
        try:
            rows = df.withColumn("_key", F.lit(0)).groupBy("_key").applyInArrow(group, "result BINARY").collect()
        except Exception as exc:
            raise EngineError(f"sequential run on Spark failed: {_task_error(exc)}") from exc
    else:
        raise ConfigError(f"idiom must be 'coalesce' or 'global_key', got {idiom!r}")
    if not rows:  # an empty batch: Spark runs no group
        return start, []
    return pickle.loads(rows[0].result)


_ARROW = {"BIGINT": "int64", "INT": "int32", "DOUBLE": "float64", "STRING": "string", "BOOLEAN": "bool_"}


def events_frame(spark, events, *, payload_type: Any = "BIGINT", codec=None):
    """A DataFrame of ``events``: columns ``tag``, ``ts``, ``payload`` and ``seq`` (the arrival order).

    ``payload_type``: BIGINT, INT, DOUBLE, STRING, BOOLEAN or a pyarrow type (with ``codec`` for a
    payload Arrow cannot type as it is); see :func:`lmstream_kit.flumina.tables.events_table`.
    """
    import pyarrow as pa

    from ..flumina.tables import events_table

    if isinstance(payload_type, str):
        kind = _ARROW.get(payload_type.upper())
        if kind is None:
            raise ConfigError(f"payload_type must be one of {', '.join(_ARROW)} or a pyarrow type, got {payload_type!r}")
        payload_type = getattr(pa, kind)()
    return spark.createDataFrame(events_table(events, payload_type, codec=codec))
