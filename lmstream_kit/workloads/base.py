"""What a workload declares: its input schema and generator, its window, its query and its twin.

One module per query registers a :class:`Workload` (:func:`register`, or :func:`register_pair`
for a sliding/tumbling pair) holding both its Spark query and its pandas/cudf twin program.

>>> w = get_workload("CM1T")
>>> w.window_kind, w.twin().workload, get_workload("CM1S").slide_s
('tumbling', 'CM1T', 10)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..exceptions import ConfigError
from ..registry import Registry

if TYPE_CHECKING:
    from ..twin.program import TwinProgram

#: name -> Workload; add a workload by registering it from a new module
WORKLOADS: Registry[Workload] = Registry("workload")


@dataclass(frozen=True, repr=False)
class Workload:
    """A streaming query and the data it runs on.

    Parameters
    ----------
    name : str
        Registry name, e.g. ``"LR2S"`` (Table III of the paper).
    schema : pyarrow.Schema
        Schema of the input rows (the spool's schema).
    make_rows : callable or None
        ``make_rows(second, n, rng) -> pyarrow.Table``: the ``n`` rows that arrive
        in simulated second ``second``; deterministic for a given ``rng``.  None:
        the workload has no generator and runs on files (``input_dir``).
    build_query : callable
        ``build_query(stream_df) -> DataFrame``: the streaming query over the
        source (Spark code; imported only when a stream starts).
    window_range_s, slide_s : float
        Window range and slide in *simulated* seconds; ``slide_s == 0`` means a
        tumbling window.  The slide is the admission controller's latency bound.
    output_mode : str
        Spark output mode of the query (``append``, ``update`` or ``complete``).
    checks : mapping
        Per-column ``(lo, hi)`` ranges that ingested user rows must satisfy.
    time_column : str, optional
        The input column that holds the simulated second (resumed generators
        continue after its largest value).
    finish_batch : callable, optional
        ``finish_batch(batch_df) -> DataFrame``: applied to each micro-batch's
        result DataFrame inside foreachBatch before it is written; for
        batch-level operations Spark cannot run on a stream, such as ordering.
        Keep it free of extra Spark jobs: each one re-runs the micro-batch's
        plan (see :func:`lmstream_kit.workloads.cm1.order_batch`).
    query_for_slide : callable, optional
        ``query_for_slide(slide_s) -> build_query``: the same query over a window
        sliding by ``slide_s``; a sliding workload with one can change its slide
        (:meth:`with_slide`).
    event_time : str, optional
        The event-time column the query's windows and watermark use (for the
        records of an attached query and for documentation).
    window_from_plan : bool
        The window is read from the query's plan when the stream starts
        (:meth:`with_window`); until then range and slide are 0.
    batch_program : callable, optional
        ``batch_program(state_dir) -> program``: the workload computes each
        micro-batch's result itself, keeping its state under ``state_dir`` (in
        the run directory).  ``program(batch_df, batch_id) -> (pyarrow.Table,
        fields)`` runs inside foreachBatch on the query's result (the events, when
        the query passes them through); the table is the batch's output and
        ``fields`` go into the batch's record.  A batch Spark runs again has the
        same id.  Flumina's fork/join executor is one
        (:func:`lmstream_kit.workloads.flumina.flumina_workload`).
    twin : callable, optional
        ``twin() -> TwinProgram``: the query's twin program, the same query on
        pandas/cudf operator by operator (:mod:`lmstream_kit.twin`; no Spark);
        look it up with :func:`lmstream_kit.twin.twin_program`, which builds it
        once.  None: the workload has no twin.
    lateness_s : float, optional
        The watermark's delay on the event-time column, simulated seconds (None: unknown).
    results_at_close : bool
        The query emits a window's rows only once the watermark closes it (an
        append-mode windowed aggregation), rather than row by row (a join).
        Then each batch's record tells the *result latency* of the windows it
        emitted (:class:`lmstream_kit.results.WindowResults`), and a tumbling
        window's controller admits at once what closes a window.
    controllers : tuple of callables
        Factories of the live objects the workload comes with
        (:class:`~lmstream_kit.protocol.BatchController` s); a LiveStream plugs one of
        each in when it is made (a Flumina workload's
        :class:`~lmstream_kit.flumina.live.FluminaControl`, say).
    """

    name: str
    description: str
    schema: pa.Schema
    make_rows: Callable[..., pa.Table] | None
    build_query: Callable[[Any], Any]
    window_range_s: float
    slide_s: float
    output_mode: str = "append"
    checks: Mapping[str, tuple] = field(default_factory=dict)
    time_column: str | None = None
    finish_batch: Callable[[Any], Any] | None = None
    query_for_slide: Callable[[float], Callable[[Any], Any]] | None = None
    twin: Callable[[], TwinProgram] | None = None
    event_time: str | None = None
    window_from_plan: bool = False
    batch_program: Callable[[Any], Callable[[Any, int], tuple[Any, dict]]] | None = None
    controllers: tuple[Callable[[], Any], ...] = ()
    lateness_s: float | None = None
    results_at_close: bool = False

    def live_objects(self) -> list:
        """The live objects a stream of this workload plugs in when it is made: one of each of its
        :attr:`controllers`, and where it emits windows at their close (:attr:`results_at_close`) a
        :class:`~lmstream_kit.results.WindowResults`, which tells every batch's result latency."""
        from ..results import WindowResults

        made = [make() for make in self.controllers]
        results = WindowResults.for_workload(self)
        return [*made, results] if results is not None else made

    def __post_init__(self) -> None:
        if self.slide_s < 0:
            raise ConfigError(f"workload {self.name}: slide must be >= 0, got {self.slide_s}")
        if self.output_mode not in ("append", "update", "complete"):
            raise ConfigError(f"workload {self.name}: unknown output mode {self.output_mode!r}")

    def __repr__(self) -> str:
        """One line: name, window and input columns (the functions it holds say nothing to a reader).

        >>> get_workload("LR2S")   # doctest: +ELLIPSIS
        <Workload LR2S: range 30 s, slide 10 s; columns time int32, vehicle int32, ...>
        """
        columns = ", ".join(f"{f.name} {f.type}" for f in self.schema)
        return f"<Workload {self.name}: {self.window_text}; columns {columns}>"

    @property
    def window_text(self) -> str:
        """The window as people read it: ``range 30 s, slide 10 s``, ``tumbling 60 s`` or ``bound 10 s``."""
        if self.window_from_plan:
            return "window read from the query's plan at start"
        if not self.window_range_s:
            return f"bound {self.slide_s:g} s"
        if self.slide_s == 0:
            return f"tumbling {self.window_range_s:g} s"
        return f"range {self.window_range_s:g} s, slide {self.slide_s:g} s"

    @property
    def generated(self) -> bool:
        """Whether the workload can generate its own traffic (else it runs on files)."""
        return self.make_rows is not None

    def with_window(self, range_s: float, slide_s: float) -> Workload:
        """This workload with the window read from its query's plan (``slide_s`` 0: tumbling).

        >>> from lmstream_kit.workloads import define_workload
        >>> w = define_workload("Q", schema="x INT", query=lambda s: s, window="infer")
        >>> w.with_window(30.0, 5.0).slide_s, w.with_window(30.0, 30.0).window_kind
        (5.0, 'tumbling')
        """
        slide = 0.0 if slide_s in (0, range_s) else float(slide_s)
        return replace(self, window_range_s=float(range_s), slide_s=slide, window_from_plan=False,
                       description=self.description if not self.window_from_plan else (
                           f"your query over {window_phrase(range_s, slide)} (read from its plan)"))

    @property
    def window_kind(self) -> str:
        return "tumbling" if self.slide_s == 0 else "sliding"

    def check_slide(self, slide_s: Any) -> float:
        """Validate a new window slide for this workload's query; returns it as a float.

        A sliding window keeps its range and takes any slide in ``(0, range]``.
        A tumbling window (or a query without :attr:`query_for_slide`) has no
        slide to change.
        """
        if isinstance(slide_s, bool) or not isinstance(slide_s, (int, float)) or not slide_s == slide_s:
            raise ConfigError(f"window slide must be a number of seconds, got {slide_s!r}")
        slide = float(slide_s)
        if self.slide_s == 0 or self.query_for_slide is None:
            raise ConfigError(
                f"workload {self.name} has a {'tumbling' if self.slide_s == 0 else 'fixed'} window: "
                f"its slide cannot change (change the latency target instead), got slide {slide_s:g} s"
            )
        if not 0 < slide <= self.window_range_s:
            raise ConfigError(
                f"window slide must be in (0, {self.window_range_s:g}] s (the window's range) "
                f"for {self.name}, got {slide_s:g}"
            )
        return slide

    def with_slide(self, slide_s: float) -> Workload:
        """This workload with its window sliding by ``slide_s`` (simulated s), same range.

        >>> w = get_workload("LR2S").with_slide(5)
        >>> w.slide_s, w.window_range_s
        (5.0, 30)
        >>> get_workload("LR2S").with_slide(45)
        Traceback (most recent call last):
        ...
        lmstream_kit.exceptions.ConfigError: window slide must be in (0, 30] s (the window's range) for LR2S, got 45
        """
        slide = self.check_slide(slide_s)
        if slide == self.slide_s:
            return self
        return replace(self, slide_s=slide, build_query=self.query_for_slide(slide))


def with_event_time(stream, column: str, lateness_s: float):
    """Add ``ts`` (a timestamp from ``column``'s simulated seconds) with a watermark.

    Windows of every workload are defined on this column; ``lateness_s`` is how
    late (simulated seconds) a row may arrive and still count.
    """
    from pyspark.sql import functions as F

    return stream.withColumn("ts", F.timestamp_seconds(column)).withWatermark(
        "ts", f"{lateness_s:g} seconds"
    )


def time_window(range_s: float, slide_s: float):
    """Spark's window over ``ts``: ``range_s`` long, sliding by ``slide_s`` (0: tumbling)."""
    from pyspark.sql import functions as F

    if slide_s:
        return F.window("ts", f"{range_s:g} seconds", f"{slide_s:g} seconds")
    return F.window("ts", f"{range_s:g} seconds")


def window_phrase(range_s: float, slide_s: float) -> str:
    """A window in words for descriptions: ``a 30 s window sliding by 5 s``, ``a 30 s tumbling window``."""
    if slide_s:
        return f"a {range_s:g} s window sliding by {slide_s:g} s"
    return f"a {range_s:g} s tumbling window"


def register(workload: Workload) -> Workload:
    return WORKLOADS.register(workload.name, workload)


def register_pair(
    name: str,
    *,
    description: str,
    window_range_s: float,
    slide_s: float,
    query_for_slide: Callable[[float], Callable[[Any], Any]],
    twin_for_slide: Callable[[float], Callable[[], TwinProgram]] | None = None,
    **fields: Any,
) -> tuple[Workload, Workload]:
    """Register ``name + "S"`` (window sliding by ``slide_s``) and ``name + "T"`` (tumbling, same range).

    ``description`` is a format string whose ``{window}`` becomes ``a 30 s window
    sliding by 5 s`` or ``a 30 s tumbling window``.  ``query_for_slide(slide)``
    and ``twin_for_slide(slide)`` give the query and the twin for a slide (0:
    tumbling); only the sliding workload can change its slide.  ``fields``: the
    other :class:`Workload` fields, the same for both.  Returns ``(sliding, tumbling)``.
    """
    sliding = Workload(
        name=f"{name}S",
        description=description.format(window=window_phrase(window_range_s, slide_s)),
        build_query=query_for_slide(slide_s),
        window_range_s=window_range_s,
        slide_s=slide_s,
        query_for_slide=query_for_slide,
        twin=twin_for_slide(slide_s) if twin_for_slide else None,
        **fields,
    )
    tumbling = Workload(
        name=f"{name}T",
        description=description.format(window=window_phrase(window_range_s, 0)),
        build_query=query_for_slide(0),
        window_range_s=window_range_s,
        slide_s=0,
        twin=twin_for_slide(0) if twin_for_slide else None,
        **fields,
    )
    return register(sliding), register(tumbling)


def get_workload(name: str) -> Workload:
    """Look a workload up by name (case-insensitive); unknown names list the known ones."""
    return WORKLOADS.get(name)
