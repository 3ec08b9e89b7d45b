"""The stream's own live parameters: window slide, latency target, policy, offered rate.

:class:`StreamControls` is the part of :class:`~lmstream_kit.live.LiveStream` that
validates these, changes them at a micro-batch boundary (restarting the query
where Spark needs it) and declares every control a view draws.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any, Optional

from .exceptions import ConfigError
from .feed.traffic import FeedGenerator
from .policies import get_policy
from .protocol import Control, Param, StreamInfo, Tunable, positive
from .record import controller_target_s, window_params

__all__ = ["StreamControls"]


class StreamControls(Tunable):
    """The live setters and declared controls of a stream (mixed into LiveStream)."""

    PARAMS = (
        Param("slide_s", float, low=0, restart=True, label="window slide (sim s)", step=0.5,
              doc="Slide of the query's window in simulated seconds, up to the window's range; the latency "
                  "target follows it.  A change restarts the query from its checkpoint."),
        Param("target_s", float, low=0, label="latency target (sim s)", step=0.25,
              doc="Latency bound of the admission controller in simulated seconds, without changing the "
                  "window (0 = the running mean of past maximum latencies)."),
        Param("policy", str, choices=("lmstream", "asap", "fixed"), restart=True, label="policy",
              doc="Admission policy: lmstream (admit when the latency bound is reached), asap (admit "
                  "everything pending at once), fixed (static trigger).  A switch to or from fixed "
                  "restarts the query from its checkpoint."),
        Param("rate_scale", float, low=0, low_open=True, log_scale=True, step=0.25, label="traffic rate ×",
              doc="Factor on the offered traffic rate of the generator."),
    )

    # ------------------------------------------------------------------ live setters
    def set_target(self, target_s: float) -> None:
        """Change the latency bound (simulated seconds) without touching the query's window.

        Applies from the next admission and is recorded with that batch as a
        ``target_s`` change (old and new value in simulated seconds).  ``0``
        makes the target the running mean of past maximum latencies (the
        tumbling-window rule).
        """
        # one step for the admissions: a batch admitted under the new bound carries its change
        with self.loop.lock:
            old = self._apply_target(target_s)
            if old != float(target_s):
                self._journal_admission_change("target_s", old, float(target_s))
            self.log_change("target_s", float(target_s), old=old)

    def _apply_target(self, target_s: float) -> float:
        """Give the controller and the optimizer the bound ``target_s`` (simulated s), unrecorded.

        Returns the target it replaces, in simulated seconds.
        """
        if self.controller is None:
            raise ConfigError(f"policy {self.policy.name!r} has no latency bound to change")
        if isinstance(target_s, bool) or not isinstance(target_s, (int, float)) or not target_s >= 0:
            raise ConfigError(f"latency target must be >= 0 seconds (0 = running mean), got {target_s!r}")
        old = round(self.controller.slide_s * self.speedup, 9)  # the controller holds wall seconds
        # the stream records the change under the name the user set, not as the controller's slide_s
        self.controller.set_slide(float(target_s) / self.speedup, record=False)
        if self.optimizer is not None:
            self.optimizer.set_target_latency(controller_target_s(float(target_s), self.speedup), record=False)
        return old

    def set_slide(self, slide_s: float) -> None:
        """Change the window slide (simulated seconds): the query's window and the latency bound.

        The latency bound follows at once (next admission).  The query's window
        can only change by restarting the query: that happens here, at a
        micro-batch boundary, from the query's checkpoint (no row lost or
        processed twice), and is recorded as a ``window_slide_s`` change with
        the first batch of the restarted query.  Windows already open keep the
        rows they hold; new rows go to the windows of the new slide.
        """
        new_workload = self.workload.with_slide(slide_s)
        if new_workload is not self.workload and self.placement.strategy.fixed_window:
            raise ConfigError(
                f"the twin executor's window is fixed for the run: cannot change the slide to {slide_s:g} s "
                "in twin mode (change the latency target instead)"
            )
        old = self.slide_s
        if self.controller is not None:
            if new_workload is self.workload:  # the window stays: only the bound can move back to the slide
                self.set_target(new_workload.slide_s)
            else:  # the bound follows the window, recorded with it as window_slide_s
                self._apply_target(new_workload.slide_s)
        if new_workload is not self.workload:
            self._follow_windows(new_workload)
        elif self.optimizer is not None:  # no controller: the optimizer's target follows the window
            self.optimizer.set_target_latency(new_workload.slide_s / self.speedup,
                                              record=new_workload is self.workload)
        if new_workload is self.workload:
            return
        self.slide_s = new_workload.slide_s
        self._restart_query("window_slide_s", old, new_workload.slide_s, workload=new_workload)

    def _follow_windows(self, workload) -> None:
        """The controller counts window closes at the new windows' ends (unrecorded: the slide change is)."""
        params = window_params(workload, self.speedup)
        update = {k: params.get(k, 0.0) for k in ("window_period_s", "close_period_s")}
        self._controller_params.update(update)  # a controller made later (a policy switch) starts with them
        if self._lm_controller is not None:
            self._lm_controller.mutate(update, record=False)

    def set_policy(self, name: str, *, trigger_s: Optional[float] = None) -> None:
        """Switch the admission policy live (``lmstream``, ``asap`` or ``fixed``).

        A switch that changes Spark's trigger (to or from ``fixed``) restarts
        the query from its checkpoint at a micro-batch boundary; the others take
        effect at the next admission.  The change is recorded with the first
        batch of the new policy.  The LMStream controller keeps what it learned
        across switches.
        """
        policy = get_policy(name, trigger_s=trigger_s)
        old = self.policy
        if policy == old:
            return
        if policy.uses_controller:
            if self._lm_controller is None:
                self._lm_controller = policy.make_gate(slide_s=self.slide_s / self.speedup,
                                                       controller_params=self._controller_params)
            gate = self._lm_controller
        else:
            gate = policy.make_gate(slide_s=0.0)
        gate.bind_changelog(self.changelog)
        if policy.trigger_s != old.trigger_s:
            # Spark's trigger changes only with a restart (before start: only the configuration)
            self._restart_query("policy", old.name, policy.name, policy=policy, gate=gate,
                                trigger_s=policy.trigger_s)
            return
        self._journal_admission_change("policy", old.name, policy.name)
        with self.loop.lock:
            self.policy, self.gate = policy, gate
            self.log_change("policy", policy.name, old=old.name)

    def _journal_admission_change(self, param: str, old: Any, value: Any) -> None:
        """Journal a change in force from the next admission (no restart): requested, prepared and
        applied now, committed when the first batch that carries it in its record completed."""
        journal = getattr(self, "journal", None)
        if journal is None or self.query is None or self._stopped:
            return
        txn = journal.begin(param, old=old, value=value)
        txn.step("prepared")
        txn.step("applied")
        self._commit_when(txn, lambda r: any(c.get("param") == param and c.get("value") == value
                                             for c in r.get("changes") or ()))

    def restart(self) -> None:
        """Restart the query from its checkpoint at a batch boundary, changing nothing.

        What any change that Spark takes only on a restart costs (the stop-and-restart baseline
        of a live change); recorded as a ``restart`` change (the run's live restarts, old and new)
        with its seconds.
        """
        if self.query is None or self._stopped:
            raise ConfigError("cannot restart the query: the stream is not running")
        done = int((self._run_info or {}).get("live_restarts", 0))
        self._restart_query("restart", done, done + 1)

    def set_batch_function(self, function, *, name: Optional[str] = None) -> None:
        """Swap the per-batch function (``batch_df -> DataFrame``, run on each batch's result) at the next
        batch boundary, with no restart (:mod:`lmstream_kit.swap`).

        ``function=None`` goes back to the query's result as it is.  The new function is first checked
        against the schema of the last batch's result (Spark's analysis, no job); one that does not fit
        is refused in one line, and the stream runs on under the old one.  The swap is a journal
        transaction (``batch_function``), applied at the batch it starts with and committed when that
        batch completed; each record's ``batch_function`` names the function it ran under.
        """
        from .swap import BatchFunction

        if function is not None and not callable(function):
            raise ConfigError(f"a batch function must be callable (batch_df -> DataFrame), got {function!r}")
        if self.placement.strategy.fixed_window:
            raise ConfigError("the twin executor runs the query itself, not Spark's batch DataFrame: "
                              "cannot set a batch function in twin mode")
        if self.workload.batch_program is not None:
            raise ConfigError(f"workload {self.workload.name} runs its own batch program, not a batch function "
                              "on the query's result: cannot set a batch function")
        name = str(name or getattr(function, "__name__", None) or "none") if function is not None else "none"
        swap = next((c for c in self.loop.plugins if isinstance(c, BatchFunction)), None)
        if swap is None:  # the first swap: the workload's own finish_batch runs first, then the function
            swap = BatchFunction(base=self.workload.finish_batch)
            self.add_controller(swap)
            with self.loop.lock:
                self._adopt(dataclasses.replace(self.workload, finish_batch=swap.finish), None, None)
        txn = self.journal.begin("batch_function", old=swap.name, value=name) if self.journal is not None else None
        reason = self.engine.check_batch_function(function, swap.base) if function is not None else None
        if reason is not None:
            if txn is not None:
                txn.abort(reason)
            raise ConfigError(f"batch function {name!r} refused: {reason}")
        if txn is not None:
            txn.step("prepared")
        swap.request(function, name, txn)

    def set_query(self, build_query, *, name: Optional[str] = None, confirm_s: float = 60.0) -> None:
        """Change the Spark query itself (``build_query(stream_df) -> DataFrame``): a restart from the
        checkpoint at a batch boundary, refused before anything stops where Spark forbids it.

        Spark restarts a query from its checkpoint only with the same stateful operators: the same
        aggregations, joins and deduplications, in the same order, with the same key and state
        types.  Projections and filters may change.  The new query's analyzed plan is compared with
        the running one's first (:mod:`lmstream_kit.query_rules`; no job runs), and a change Spark
        forbids (new aggregation keys, say) is refused in one line naming it, journaled as aborted;
        the stream runs on.  A new query that fails its first batch after the restart (on data, or
        where Spark refuses at run time what the plans did not show) is rolled back: the old query
        starts again and runs that batch, the change is aborted with Spark's error, and a
        ConfigError says so (it waits up to ``confirm_s`` seconds for that first batch).  The window and the latency bound stay as they are (change the bound with
        :meth:`set_target`); the new query's window slide cannot be changed live.
        """
        if not callable(build_query):
            raise ConfigError(f"a query must be a function stream_df -> DataFrame, got {build_query!r}")
        if self.placement.strategy.fixed_window:
            raise ConfigError("the twin executor runs the query itself: cannot change the query in twin mode")
        if self.query is None or self._stopped:
            raise ConfigError("cannot change the query: the stream is not running (give the workload its query "
                              "before it starts)")
        name = str(name or getattr(build_query, "__name__", None) or "query")
        old = getattr(self, "_query_name", "initial")
        new_workload = dataclasses.replace(self.workload, build_query=build_query, query_for_slide=None)
        try:
            reason = self.engine.query_change_refused(self.workload, new_workload)
        except ConfigError as exc:
            reason = str(exc)
        if reason is not None:
            if self.journal is not None:
                self.journal.begin("query", old=old, value=name).abort(reason)
            raise ConfigError(f"query {name!r} refused: {reason}")
        # a ConfigError where the new query failed its first batch and the old one came back
        self._restart_query("query", old, name, workload=new_workload, confirm_s=positive("confirm_s", confirm_s))
        self._query_name = name

    #: what ``lmstream-kit reconfigure`` (the channel's ``reconfigure`` request) may change, besides
    #: every declared control by its key (``inflection_point``, ``flumina.workers``, ...)
    RECONFIGURE_OPS = ("slide_s", "target_s", "policy", "rate_scale", "state_partitions", "restart")

    def on_reconfigure(self, op: str, value: Any) -> dict:
        """A live reconfiguration asked by another process over the stream's channel (one of
        :attr:`RECONFIGURE_OPS`, or the key of a declared control: :meth:`controls`); returns what is
        in force after it, and its journal transaction."""
        setters = {"slide_s": self.set_slide, "target_s": self.set_target, "policy": self.set_policy,
                   "rate_scale": self.set_rate_scale, "state_partitions": self.set_state_partitions,
                   "restart": lambda _: self.restart()}
        control = None
        if op not in setters:  # a declared control: the placement's, or a plugged controller's (flumina.workers)
            controls = {c.key: c for c in self.controls()}
            control = controls.get(op)
            if control is None:
                raise ConfigError(f"unknown reconfiguration {op!r}; known: {', '.join(self.RECONFIGURE_OPS)}, "
                                  f"or a control: {', '.join(k for k in controls if k not in setters)}")
            if control.disabled:
                raise ConfigError(f"{op} cannot change now: {control.disabled}")
        before = len(self.journal.transactions()) if self.journal is not None else 0
        (control.setter if control is not None else setters[op])(value)
        txns = self.journal.transactions() if self.journal is not None else []
        now = {"slide_s": self.slide_s, "policy": self.policy.name, "rate_scale": self.rate_scale,
               "state_partitions": self.state_partitions()}
        if control is not None:
            now[op] = next((c.value for c in self.controls() if c.key == op), None)
        return {"op": op, "value": value, "now": now, "transaction": txns[-1] if len(txns) > before else None}

    #: journal ops a restarted run can take back from the journal (``restore_config``), and how
    _RESTORABLE = ("policy", "window_slide_s", "target_s", "flumina_workers", "source_partitions", "cluster_executors")

    def _restore_config(self) -> dict:
        """Before the query starts: take the last committed policy, window slide, latency target,
        Flumina workers, source partitions and cluster executors from the journal, in the order they committed; ``{op: value}`` restored, or
        ``"not restored: <why>"``."""
        restored: dict = {}
        for op, t in self.journal.committed().items():
            if op not in self._RESTORABLE:
                continue
            value = t.get("value")
            try:
                if op == "policy":
                    self.set_policy(value, trigger_s=t.get("trigger_s") if value == "fixed" else None)
                elif op == "window_slide_s":
                    self.set_slide(value)
                elif op == "target_s":
                    self.set_target(value)
                else:  # a plugged controller's parameter: the control of that key
                    key = op.replace("_", ".", 1)
                    control = next((c for c in self.controls() if c.key == key), None)
                    if control is None:
                        raise ConfigError(f"the stream has no control {key}")
                    control.setter(value)
                restored[op] = value
            except ConfigError as exc:
                restored[op] = f"not restored: {exc}"
        return restored

    def state_partitions(self) -> Optional[int]:
        """How many partitions the query keeps its state in (from its checkpoint); None without state."""
        return self.engine.state_partitions(self.run_dir / "checkpoint")

    def set_state_partitions(self, partitions: int, *, why: str = "") -> None:
        """Repartition the query's state live: stop between batches, repartition, restart (Spark 4.2+).

        Admission is held, the admitted batches commit, the query stops, Spark's offline state
        repartition (:mod:`lmstream_kit.engine.state`) rewrites the checkpoint's state into
        ``partitions``, and the query starts again from it: no row is lost or processed twice.
        The change is recorded as ``state_partitions`` with the first batch after the restart,
        with the repartition's and the whole restart's seconds.  What cannot be done here (Spark
        before 4.2, a state store other than RocksDB, no state yet) is refused before anything
        stops; where Spark's repartition itself fails, the query starts again unchanged, the
        change is recorded as aborted, and the error is raised.
        """
        if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
            raise ConfigError(f"state partitions must be an integer >= 1, got {partitions!r}")
        if self.query is None or self._stopped:
            raise ConfigError(f"cannot set state partitions to {partitions}: the stream is not running "
                              "(start it with state_partitions= to choose them)")
        checkpoint = self.run_dir / "checkpoint"
        reason = self.engine.state_repartition_unsupported(checkpoint)
        if reason is not None:
            raise ConfigError(f"cannot set state partitions to {partitions}: {reason}")
        old = self.state_partitions()
        if old == partitions:
            return

        def repartition() -> dict:
            done = self.engine.repartition_state(checkpoint, partitions)
            return {"repartition_s": done["repartition_s"]}

        self._restart_query("state_partitions", old, partitions, between=repartition, **({"why": why} if why else {}))

    # ------------------------------------------------------------------ for plugged controllers (StreamHost)
    def parallelism_unsupported(self, kind: str) -> Optional[str]:
        """Why this stream cannot set a parallelism knob of ``kind`` for a controller (None: it can)."""
        if kind == "input":
            return None
        if kind == "shuffle":
            return ("the kit's queries shuffle into Spark's stateful operators, whose partitions are the "
                    "state store's (a 'state' knob)")
        if kind != "state":
            return f"unknown knob kind {kind!r}"
        if self.query is None or self._stopped:
            return "the stream is not running"
        return self.engine.state_repartition_unsupported(self.run_dir / "checkpoint")

    def warm_workers(self, workers: int) -> Optional[float]:
        """Ready Spark for a Flumina program's passes on ``workers`` before a rescale (seconds; None:
        the stream is not running)."""
        if self.query is None or self._stopped or self.engine.spark is None:
            return None
        return self.engine.warm_flumina_workers(workers)

    def executors_unsupported(self) -> Optional[str]:
        """Why this stream's executors cannot be scaled now (None: they can; a cluster without dynamic allocation)."""
        if self._stopped:
            return "the stream stopped"
        return self.engine.executors_unsupported()

    def executor_count(self) -> Optional[int]:
        """The application's executors now (None where they cannot be scaled)."""
        return self.engine.executor_count() if self.engine.spark is not None else None

    def scale_executors(self, total: int, timeout_s: float = 60.0) -> dict:
        """Make the application run ``total`` executors, waiting until they are there (engine's ``scale_executors``)."""
        reason = self.executors_unsupported()
        if reason is not None:
            raise ConfigError(f"cannot set executors to {total}: {reason}")
        return self.engine.scale_executors(total, timeout_s=timeout_s)

    def task_function_unsupported(self, function) -> Optional[str]:
        """Why Spark's tasks cannot load ``function`` (one task tries), None where they can."""
        return self.engine.task_function_unsupported(function)

    def request_state_partitions(self, partitions: int, why: str = "") -> None:
        """Repartition the state into ``partitions`` in the background (:meth:`set_state_partitions`).

        For a controller deciding inside the run loop, which must not wait for the restart.  A
        request while a restart runs is dropped (the controller asks again).  A refusal or a failure
        is recorded as an aborted ``state_partitions`` change, with the reason.
        """
        if self._restarting:
            return

        def run() -> None:
            try:
                self.set_state_partitions(partitions, why=why)
            except ConfigError as exc:  # refused before stopping: nothing changed
                self.log_change("state_partitions", self.state_partitions(), aborted=str(exc), requested=partitions,
                                why=why)
            except Exception:  # noqa: BLE001  (set_state_partitions recorded it, and the stream failed or ran on)
                pass

        threading.Thread(target=run, name=f"state-partitions-{partitions}", daemon=True).start()

    def set_inflection_point(self, nbytes: float) -> None:
        """Set the inflection point by hand (bytes); it freezes the optimizer until :meth:`release_optimizer`."""
        self.placement.set_inflection_point(nbytes)

    def freeze_optimizer(self) -> None:
        """Keep the current inflection point (the optimizer stops proposing)."""
        self._need_optimizer().freeze()

    def release_optimizer(self) -> None:
        """Let the optimizer tune the inflection point again."""
        self._need_optimizer().release()

    def _need_optimizer(self):
        if self.optimizer is None:
            raise ConfigError("this stream runs without the inflection-point optimizer")
        return self.optimizer

    def set_rate_scale(self, factor: float) -> None:
        """Scale the offered traffic rate of the running generator."""
        if not isinstance(self.feed, FeedGenerator):
            raise ConfigError("the offered rate can only be changed for generated traffic")
        self.feed.set_rate_scale(factor)
        self.log_change("rate_scale", float(factor))

    def set_param(self, name: str, value: Any) -> None:
        """Set one of the stream's declared parameters (see :attr:`PARAMS`) through its setter."""
        self.param(name)
        {"slide_s": self.set_slide, "target_s": self.set_target, "policy": self.set_policy,
         "rate_scale": self.set_rate_scale}[name](value)

    # ------------------------------------------------------------------ declared controls
    def info(self) -> StreamInfo:
        """What a view's title and status line name this stream by."""
        return StreamInfo(self.workload.name, self.policy.name, f"speedup {float(self.speedup):g}×")

    @property
    def rate_scale(self) -> float:
        """The factor on the generated traffic's rate (1.0 without generated traffic)."""
        scale = getattr(self.feed, "rate_scale", None)
        scale = getattr(self.traffic, "scale", None) if scale is None else scale
        return float(scale) if scale is not None else 1.0

    def disabled_reason(self, name: str) -> Optional[str]:
        workload = self.workload.name
        if name == "slide_s":
            if self.workload.slide_s == 0:
                return f"workload {workload} has a tumbling window: its slide cannot change"
            if self.workload.query_for_slide is None:
                return f"workload {workload} has a fixed window: its slide cannot change"
            if self.placement.strategy.fixed_window:
                return "the twin executor's window is fixed for the run: change the latency target instead"
        if name == "target_s" and self.controller is None:
            return f"policy {self.policy.name!r} has no admission controller, so no latency target"
        if name == "rate_scale" and self.traffic is None:
            return "the input is read from a directory: there is no generated traffic to scale"
        return None

    def controls(self) -> list[Control]:
        """The live parameters a view draws: the stream's, the placement's, then the plug-ins'."""
        window = float(self.workload.window_range_s or 0)
        # the control sets the bound (the controller's slide; 0: the tumbling rule's running target), not the
        # shorter target a sliding window starts with before its first batch (cold_target_s)
        c = self.controller
        target = (c.slide_s if c.slide_s > 0 else c.target_s) * self.speedup if c is not None else None
        own = {
            "slide_s": (self.slide_s, 0.5, max(window, self.slide_s, 1.0)),
            "target_s": (self.slide_s if target is None else target, 0.0,
                         max(window, 2 * self.slide_s, 2 * (target or 0.0), 1.0)),
            "policy": (self.policy.name, None, None),
            "rate_scale": (self.rate_scale, 2.0**-3, 2.0**3),
        }
        declared = {
            p.name: Control(p.name, p, own[p.name][0], lambda v, n=p.name: self.set_param(n, v),
                            self.disabled_reason(p.name), "stream", low=own[p.name][1], high=own[p.name][2])
            for p in self.PARAMS
        }
        inflection, optimizer = self.placement.controls()
        plugins = [c for controller in self.controllers[2:] for c in controller.controls()]
        return [inflection, *declared.values(), optimizer, *plugins]
