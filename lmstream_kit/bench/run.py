"""Running the sweep: :class:`_Runner` runs one cell's stream on the shared SparkSession,
:func:`run_bench` runs every cell (and the capacity search) and writes the results."""

from __future__ import annotations

import platform
import shutil
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from ..exceptions import ConfigError
from .capacity import PROBE_COLUMNS, _capacity, move_probes, with_batch_fields
from .cells import batch_rows, cell_row, collector_fields, metrics_so_far
from .config import BenchConfig, ProgressFn, _config_dict
from .outputs import _kit_version, machine_boot, machine_info, source_commit, write_outputs, write_reports
from . import resume as _resume


class _Runner:
    """Runs cells on one SparkSession and measures their CPU (``engine``: the session's
    :class:`~lmstream_kit.engine.adapter.SparkEngine`, or None where ``spark`` is given alone).

    Before a query's first measured run on a JVM, :meth:`warm` runs a discarded warm-up of it:
    ``cfg.warmup_s`` simulated seconds, and on a JVM that has run nothing yet at least
    ``cfg.jvm_warmup_s`` wall seconds.  A new session (:meth:`recover`) is a new JVM, warmed again.

    A run is watched (:class:`~lmstream_kit.bench.watchdog.Watchdog`) where the kit started the
    session: a phase that outlives its own timeouts by :attr:`START_SLACK_S` (the start and the
    feed) or :attr:`STOP_SLACK_S` (what follows the feed, the stop included) has a JVM that no
    longer answers, which is killed; the run then fails with :attr:`hung` set, and
    :meth:`recover` starts a new session.

    Why the first is longer, measured on the 2-core VM (paper-2026-11-27): the sweep's first cell,
    after a 10 s warm-up, planned its LR1S batches in 181-204 ms (median) in its first third and in
    102-119 ms in its last, as every later cell did from its start, and it cost 1.5x the CPU per
    row of the same policy's cell with random traffic: Java's compiler was still at work.  The
    capacity search had no warm-up at all after a resume: its first probe there (LR2S, lmstream,
    45,255 rows/s) made 29 batches with 10% late, and its repetition on the warm JVM 18, all within.
    """

    #: seconds a run's start and feed may take past the feed's own wait (Spark's start on a cold JVM)
    START_SLACK_S = 120.0
    #: seconds the stop may take past the catch-up or the drain: the stop's own bounds (the batch in
    #: flight's 60 s, Spark's 60 s stopTimeout, 30 s for the last progress) and a minute more
    STOP_SLACK_S = 210.0

    def __init__(self, cfg: BenchConfig, out: Path, spark, meter, stamp: str = "", engine=None) -> None:
        self.cfg = cfg
        self.out = out
        self.spark = spark
        self.meter = meter
        self.stamp = stamp  # the bench's start: a fresh topic for each run of a bench on Kafka
        self.engine = engine
        self.warmed: set = set()  # the queries warmed up on this JVM
        self.lost_to_heap: Optional[bool] = None  # whether the last lost session's JVM ran out of heap
        self.stuck: Optional[str] = None  # why the last run's query did not stop (a new JVM runs the next)
        self.hung: Optional[str] = None  # why the last run's watchdog killed its JVM (see run())

    def warmup_s(self) -> float:
        """Simulated seconds of the next warm-up: longer on a JVM that has run no query yet (0: none)."""
        if self.cfg.warmup_s <= 0:
            return 0.0
        if self.warmed:
            return float(self.cfg.warmup_s)
        return max(float(self.cfg.warmup_s), float(self.cfg.jvm_warmup_s) * self.cfg.speedup)

    def warm(self, query: str, announce: Optional[Callable[[str], None]] = None) -> bool:
        """Run ``query``'s discarded warm-up (asap, constant traffic, the bench's rate) where it has not
        run on this JVM; ``announce(label)`` first.  Whether one ran."""
        name = self.cfg.workload(query).name
        duration = self.warmup_s()
        if duration <= 0 or name in self.warmed:
            return False
        if announce is not None:
            announce(f"warm-up {name}")
        self.run(query, "asap", "constant", rate=self.cfg.rate, seed=self.cfg.seed, duration_s=duration,
                 run_dir=self.out / "runs" / f"warmup-{name}")
        self.warmed.add(name)
        return True

    def recover(self) -> Optional[str]:
        """After a run failed: where the session was lost with it (Spark's JVM exited, out of heap or
        by Spark's own exit, or Spark stopped its context), start a new session and return why the
        old one went; None where the session still runs (the failure was the stream's).  A run whose
        query did not stop has its new session already (:attr:`stuck`).  ``lost_to_heap`` says
        whether the old JVM ran out of heap (None: its exit code is unknown)."""
        if self.engine is None:
            return None
        if self.stuck is not None:  # run() put the session whose query did not stop by a new one
            self.lost_to_heap = None
            return f"the query did not stop: {self.stuck}"
        if self.hung is not None:  # run()'s watchdog killed a JVM that no longer answered
            self.lost_to_heap = None
            if self.engine.jvm_exited() is not None:
                self._restart()
            return self.hung
        why = self.engine.session_lost()
        if why is None:
            return None
        from ..engine.session import OUT_OF_HEAP_EXIT

        code = self.engine.jvm_exit_code()
        self.lost_to_heap = None if code is None else code == OUT_OF_HEAP_EXIT
        self._restart()
        return why

    def _restart(self) -> None:
        """A new session on a new JVM, its code cold again."""
        from ..cpu import CpuMeter

        self.engine.restart()
        self.spark = self.engine.spark
        self.warmed.clear()  # a new JVM: its code is cold again
        if self.meter is not None:
            self.meter = CpuMeter(self.engine.driver_pid())

    def stream(self, query: str, policy: str, traffic: str, *, rate: float, seed: int, duration_s: float,
               run_dir: Path):
        from ..live import LiveStream

        if run_dir.exists():
            shutil.rmtree(run_dir)  # a fresh run, not a resume of an older bench
        return LiveStream(
            self.cfg.workload(query),
            policy=policy,
            traffic=traffic,
            rate=rate,
            spread=self.cfg.spread,
            speedup=self.cfg.speedup,
            seed=seed,
            duration_s=duration_s,
            run_dir=run_dir,
            spark=self.spark,
            trigger_s=self.cfg.trigger_s,
            output=self.cfg.output,
            read=self.cfg.read,
            device_mode=self.cfg.device_mode,
            optimizer=self.cfg.optimizer,
            controller={"catch_up": self.cfg.catch_up, "service_model": self.cfg.service_model,
                        **({"tumbling_target": "paper"} if self.cfg.tumbling_target == "paper" else {}),
                        **self.cfg.controller},
            kafka=self.cfg.topic_uri(run_dir.name, self.stamp),
            kafka_partitions=self.cfg.kafka_partitions,
            state_store=self.cfg.state_store,
        )

    def run(self, query: str, policy: str, traffic: str, *, rate: float, seed: int, duration_s: float,
            run_dir: Path, catch_up_s: Optional[float] = None):
        """Run one stream to the end of its traffic; returns (metrics frame, cpu dict, caught_up).

        With ``catch_up_s=None`` everything fed is processed (the stream is
        drained).  Otherwise the stream gets ``catch_up_s`` wall seconds after the
        feed ends to process what is pending under its own policy, and is then
        stopped; ``caught_up`` says whether it did.
        """
        from ..exceptions import EngineError
        from ..metrics import load_metrics

        feed_s = self.feed_wait_s(duration_s)
        self.hung = self.stuck = None  # a run that fails before its stop says nothing of an earlier run's
        dog = self._watchdog()
        try:
            if dog is not None:
                dog.arm(feed_s + self.START_SLACK_S, "start and feed")
            cpu, caught_up = self._run(query, policy, traffic, rate=rate, seed=seed, duration_s=duration_s,
                                       run_dir=run_dir, catch_up_s=catch_up_s, feed_s=feed_s, dog=dog)
        except Exception as exc:
            if self.hung is None:
                raise
            raise EngineError(self.hung) from exc  # a py4j call failed as the JVM went: say why it went
        finally:
            if dog is not None:
                dog.close()
        if self.hung is not None:  # every call returned, the JVM gone under them: the run is lost all the same
            raise EngineError(self.hung)
        return load_metrics(run_dir), cpu, caught_up

    def feed_wait_s(self, duration_s: float) -> float:
        """Wall seconds a run of ``duration_s`` simulated seconds waits for its feed to end, and for its
        drain: three times the feed's wall time, and two minutes more."""
        return 3 * duration_s / self.cfg.speedup + 120

    def _watchdog(self):
        """A watchdog that kills Spark's JVM under :meth:`run`, where the kit started the session."""
        if self.engine is None or self.engine.external:
            return None
        from .watchdog import Watchdog

        def kill(phase: str) -> None:
            # said before the kill: the calls that fail as the JVM goes find the reason there
            self.hung = (f"the run's {phase} outlived its timeouts: Spark's JVM (pid {self.engine.jvm_pid}) "
                         f"answered no call, as one collecting a full heap over and over does, and was killed")
            self.engine.kill()

        return Watchdog(kill)

    def _run(self, query: str, policy: str, traffic: str, *, rate: float, seed: int, duration_s: float,
             run_dir: Path, catch_up_s: Optional[float], feed_s: float, dog) -> tuple[Optional[dict], bool]:
        """:meth:`run`'s stream, under ``dog`` (None: unwatched); its (cpu dict, caught_up)."""
        if self.spark is not None:  # every run starts on a collected heap, whatever ran before it
            from ..engine.state import collect_heap

            collect_heap(self.spark)
        stream = self.stream(query, policy, traffic, rate=rate, seed=seed, duration_s=duration_s,
                             run_dir=run_dir)
        before = self.meter.sample() if self.meter is not None else None
        caught_up = True
        from ..signals import deferred_stop

        try:
            with deferred_stop():  # a stop in Spark's start-up would leave the query half started
                stream.start()
        except KeyboardInterrupt:
            stream.stop(drain=False)
            raise
        try:
            stream.wait(until=lambda s: s.feed_finished(), timeout=feed_s)
            if dog is not None:
                dog.arm((feed_s if catch_up_s is None else catch_up_s) + self.STOP_SLACK_S,
                        "drain and stop" if catch_up_s is None else "catch-up and stop")
            if catch_up_s is None:
                stream.stop(drain=True, timeout=feed_s)
            else:
                try:
                    stream.wait(until=lambda s: s.caught_up(), timeout=catch_up_s)
                except TimeoutError:
                    caught_up = False
                stream.stop(drain=False)
        finally:
            if dog is not None and dog.fired is None and self.hung is None:
                dog.arm(self.STOP_SLACK_S, "stop")  # a wait that failed (the feed's) leaves the stop its own time
            try:
                stream.stop(drain=False)  # no-op when already stopped
            finally:
                if dog is not None:
                    dog.disarm()
            killed = self.hung is not None
            after = self.meter.sample() if self.meter is not None and not killed else None
            self.stuck = None if killed else stream.engine.stop_failed
            if self.stuck is not None and self.engine is not None:
                # its batch still runs (a JVM collecting its full heap over and over): not under the next run
                self._restart()
        cpu = (after - before).to_dict() if before is not None and after is not None else None
        return cpu, caught_up


@dataclass
class BenchResult:
    results: Any
    batches: Any
    capacity: Any
    meta: dict
    out: Path

    @property
    def report(self) -> Path:
        return self.out / "report.html"


def run_bench(
    cfg: BenchConfig,
    out,
    *,
    spark=None,
    progress: Optional[ProgressFn] = None,
    command: Optional[str] = None,
    reproduction: Optional[Path] = None,
    notes: Optional[str] = None,
    resume: bool = False,
    remeasure: Sequence[str] = (),
) -> BenchResult:
    """Run the sweep (and the capacity search) and write results, figures and report.

    ``progress(event)`` is called before and after every cell/probe with
    ``{"phase", "done", "total", "label"}`` (``phase``: warmup, sweep, capacity).
    ``resume``: go on with the bench in ``out`` that was interrupted; the cells and capacity
    probes it finished are kept and only the rest run (:mod:`~lmstream_kit.bench.resume`; a
    ConfigError where the command measures differently).  Without it, a bench in ``out`` is
    started afresh.  A resumed bench keeps a finished cell only where every policy of its (query,
    traffic, repetition, rate) was kept too: otherwise they all run again, side by side
    (:func:`~lmstream_kit.bench.resume.side_by_side`), as do every cell of a query in ``remeasure``;
    ``meta["remeasured"]`` lists those groups.
    """
    import pandas as pd

    from ..cpu import CpuMeter
    from ..engine.adapter import SparkEngine
    from ..metrics import JsonlWriter

    out = Path(out)
    remeasure = _remeasured(cfg, remeasure, resume)  # refused before anything is written
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create bench directory {out}: {exc.strerror}") from None
    notify = progress or (lambda event: None)
    started = datetime.now(timezone.utc)
    settings = _config_dict(cfg)
    saved = _resume.check(out, settings) if resume else None  # refused before Spark starts
    if cfg.feed is not None:  # a broker that does not answer is one line, before Spark starts
        from ..feed.kafka import check_reachable, parse_kafka_uri

        check_reachable(parse_kafka_uri(cfg.feed))
    engine = SparkEngine(master=cfg.master, spark=spark, conf=cfg.spark_conf, app_name="lmstream_kit-bench")
    engine.open()
    try:
        cfg.resolve_windows(engine.query_window)
        meter = CpuMeter(engine.driver_pid())
        stamp = started.strftime("%Y%m%dT%H%M%S")
        runner = _Runner(cfg, out, engine.spark, meter, stamp=stamp, engine=engine)
        now = started.isoformat(timespec="seconds")
        commit = source_commit()
        stale, starts, searched = None, {}, []
        if resume:
            stale = _resume.probes_stale(saved, settings)
            if stale is not None:  # the probes measured another search: it starts over, the cells stay
                _resume.discard_probes(out, stamp)
            saved = _resume.resumed(out, saved, settings, now, commit)
            # a probe logged before the kit recorded its batches' size and speed has them from its journal
            kept, prior = _resume.finished_cells(out), with_batch_fields(out, _resume.finished_probes(out))
            elsewhere = {}
            if cfg.capacity and cfg.at_capacity is not None:  # cells at capacity run where it was searched
                elsewhere = _resume.searched_elsewhere(prior, kept, machine_boot())
                aside = _resume.set_aside(out, prior, elsewhere, stamp)
                move_probes(out, aside, f"set-aside-{stamp}")  # their journals kept
                prior = [row for row in prior if row["query"] not in elsewhere]
                starts = _resume.search_starts(aside)
            searched = _resume.note_searched_again(out, elsewhere, now)  # this part's and the parts' before
        else:
            saved = _resume.start(out, settings, now, commit)
            kept, prior = {}, []
        meta = {
            "command": command or "run_bench(...)",
            "started_at": saved.get("started_at") or now,
            **({"resumed_at": saved["resumed_at"]} if saved.get("resumed_at") else {}),
            "machine": machine_info(),
            "python": platform.python_version(),
            "spark_version": engine.spark_version(),
            "java_version": engine.java_version(),
            "kit_version": _kit_version(),
            "commits": saved.get("commits") or [commit],
            **({"capacity_restarted": stale} if stale is not None else {}),
            **({"capacity_searched_again": searched} if searched else {}),
            "master": engine.master,
            "config": (config := _config_dict(cfg)),  # after resolve_windows: the windows found
            **{k: config[k] for k in ("speedup", "duration_s", "repeat", "rate", "queries",
                                      "policies", "traffic", "trigger_s", "output")},
            "feed": cfg.feed or "spool",
        }
        cells_log = JsonlWriter(out / "cells.jsonl")
        rows: list[dict] = []
        batch_records: list[dict] = []
        cells = cfg.cells()
        kept, again = _resume.side_by_side(cells, kept, remeasure)
        if remeasured := _resume.note_remeasured(out, again):  # this part's and the parts' before
            meta["remeasured"] = remeasured
        to_run = {cfg.workload(c["query"]).name for c in cells if _resume.cell_key(c) not in kept}
        warm = [n for n in (cfg.workload(q).name for q in cfg.queries) if n in to_run] if cfg.warmup_s > 0 else []
        progress = {"done": 0, "total": len(cells) + len(warm), "planned": set(warm)}

        def run_cells(cells: list[dict], phase: str) -> Optional[str]:
            """Run (or keep) ``cells`` in order; the failed cell's error (one line), None if none failed."""
            for cell in cells:
                workload = cfg.workload(cell["query"])
                row = kept.get(_resume.cell_key(cell))
                if row is not None:  # measured before the bench was interrupted
                    from ..metrics import load_metrics

                    metrics = load_metrics(out / row["run_dir"])
                    if "gc_share" not in row:  # a cell of a bench part before the kit recorded collections
                        row = {**row, **collector_fields(metrics)}
                    rows.append(row)
                    batch_records.extend(_batch_records(row, cell, workload, out, cfg.speedup, metrics))
                    progress["done"] += 1
                    notify({"phase": phase, "done": progress["done"], "total": progress["total"],
                            "label": f"kept {row['run_dir']}"})
                    continue
                def announce(label: str) -> None:
                    if workload.name not in progress["planned"]:  # a new session's: not counted before
                        progress["total"] += 1
                    progress["planned"].discard(workload.name)
                    notify({"phase": "warmup", "done": progress["done"], "total": progress["total"], "label": label})

                if runner.warm(workload.name, announce):
                    progress["done"] += 1
                label = _cell_label(workload.name, cell)
                notify({"phase": phase, "done": progress["done"], "total": progress["total"], "label": label})
                seed = cfg.seed + cell["rep"]
                run_dir = out / "runs" / _cell_dir(workload.name, cell)
                failed = None
                try:
                    metrics, cpu, _ = runner.run(workload.name, cell["policy"], cell["traffic"], rate=cell["rate"],
                                                 seed=seed, duration_s=cfg.duration_s, run_dir=run_dir)
                except Exception as exc:  # noqa: BLE001  (a cell whose stream failed: keep what it measured)
                    from ..exceptions import one_line

                    failed = one_line(exc)
                    metrics = metrics_so_far(run_dir)
                    cpu = None
                if failed is None and runner.stuck is not None:  # measured; its query outlived the stop
                    meta.setdefault("restarts", []).append(f"{label}: the query did not stop: {runner.stuck}")
                row = cell_row(metrics, workload=workload, policy=cell["policy"], traffic=cell["traffic"],
                               rep=cell["rep"], seed=seed, rate=cell["rate"], speedup=cfg.speedup,
                               duration_s=cfg.duration_s, cpu=cpu)
                row.update(run_dir=str(run_dir.relative_to(out)), spark_version=meta["spark_version"],
                           feed="spool" if cfg.feed is None else "kafka", load=cell["load"],
                           failed=failed, boot=machine_boot())
                rows.append(row)
                cells_log.append(row)
                batch_records.extend(_batch_records(row, cell, workload, out, cfg.speedup, metrics))
                progress["done"] += 1
                notify({"phase": phase, "done": progress["done"], "total": progress["total"], "label": label})
                if failed is not None:
                    restarted = runner.recover()
                    if restarted is not None:  # its JVM exited with it (out of heap): the rest on a new one
                        meta.setdefault("restarts", []).append(f"{label}: {restarted}")
                        continue
                    meta["failed"] = f"{label} failed: {failed}"  # the session may be unusable: stop here
                    return failed
            return None

        failed = run_cells(cells, "sweep")
        probes: list[dict] = []
        if cfg.capacity and failed is None:
            near_failed: list = []

            def near_cells(query: str, query_probes: list) -> None:
                """The query's cells at a share of asap's capacity, as soon as its search is done: on the
                machine that searched it (a sweep resumed on another VM, faster or slower, would run
                them at a share of a capacity measured elsewhere)."""
                nonlocal kept
                if cfg.at_capacity is None or near_failed:
                    return
                near, skipped = cfg.capacity_cells(query_probes, queries=[query])
                if skipped:
                    meta.setdefault("at_capacity_skipped", {}).update(skipped)
                kept, again = _resume.side_by_side(near, kept, remeasure)
                if remeasured := _resume.note_remeasured(out, again):
                    meta["remeasured"] = remeasured
                fresh = {cfg.workload(c["query"]).name for c in near if _resume.cell_key(c) not in kept}
                cold = fresh - runner.warmed if cfg.warmup_s > 0 else set()
                progress["planned"] |= cold
                progress["total"] += len(near) + len(cold)
                if (why := run_cells(near, "sweep")) is not None:
                    near_failed.append(why)  # the session may be unusable: no more of these cells

            probes = _capacity(cfg, runner, out, notify, prior=prior, on_query_done=near_cells, starts=starts)
            failed = near_failed[0] if near_failed else None
        cells_log.close()

        results = pd.DataFrame(rows)
        batches = pd.DataFrame(batch_records)
        capacity = pd.DataFrame(probes, columns=PROBE_COLUMNS)
        meta["finished_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
        write_outputs(out, results, batches, capacity, meta, cfg.results_format)
        write_reports(out, results, batches, capacity, meta, reproduction=reproduction, notes=notes)
        return BenchResult(results, batches, capacity, meta, out)
    finally:
        engine.close()


def _remeasured(cfg: BenchConfig, queries: Sequence[str], resume: bool) -> frozenset:
    """The ``queries`` to measure again, as the sweep's cells name them (any case); a ConfigError
    naming a query the sweep does not run, or where ``queries`` come without ``resume``."""
    if not queries:
        return frozenset()
    if not resume:
        raise ConfigError("remeasure needs resume: a bench that is not resumed measures every cell anyway")
    names = {str(q).upper(): q for q in cfg.queries}  # as the cells name them
    out = set()
    for q in queries:
        if str(q).upper() not in names:
            raise ConfigError(f"cannot remeasure {q!r}: the sweep's queries are {', '.join(cfg.queries)}")
        out.add(names[str(q).upper()])
    return frozenset(out)


def _cell_label(query: str, cell: dict) -> str:
    label = f"{query} {cell['policy']} {cell['traffic']} r{cell['rep']}"
    if cell["load"] == "overload":
        return label + f" overload {cell['rate']:g} rows/s"
    if cell["load"] == "capacity":
        return label + f" at {cell['rate']:g} rows/s (near asap's capacity)"
    return label


def _cell_dir(query: str, cell: dict) -> str:
    """A cell's run directory name: ``Q-policy-traffic-rN``, with ``-overload-RATE`` or ``-at-RATE`` for those loads.

    The rate is in the name so that a resumed bench whose overload rate changed keeps the old cells'
    runs (a kept cell's row names its own directory, ``-overload`` in benches before the rate was).

    >>> _cell_dir("LR2S", {"policy": "fixed", "traffic": "constant", "rep": 0, "load": "overload", "rate": 192000.0})
    'LR2S-fixed-constant-r0-overload-192000'
    """
    name = f"{query}-{cell['policy']}-{cell['traffic']}-r{cell['rep']}"
    if cell["load"] == "overload":
        return f"{name}-overload-{cell['rate']:g}"
    if cell["load"] == "capacity":
        return f"{name}-at-{cell['rate']:g}"
    return name


def _batch_records(row: dict, cell: dict, workload, out: Path, speedup: float, metrics=None) -> list[dict]:
    """The batch rows of one cell (``metrics`` None: read from its run directory, for a kept cell)."""
    if metrics is None:
        from ..metrics import load_metrics

        metrics = load_metrics(out / row["run_dir"])
    return [{**b, "rate": cell["rate"], "load": cell["load"]}
            for b in batch_rows(metrics, workload=workload, policy=cell["policy"], traffic=cell["traffic"],
                                rep=cell["rep"], speedup=speedup)]
