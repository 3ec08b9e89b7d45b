"""What one bench run sweeps: :class:`BenchConfig`, its validated names and its cells in run order."""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Mapping, Optional, Sequence

from ..devices import check_device_mode
from ..exceptions import ConfigError
from ..policies import POLICIES
from ..stream_config import check_state_store
from ..workloads import Workload, load_workload

ProgressFn = Callable[[dict], None]

#: the paper's six queries (Table III)
ALL_QUERIES = ("LR1S", "LR1T", "LR2S", "CM1S", "CM1T", "CM2S")


@dataclass
class BenchConfig:
    """What one ``bench`` run sweeps.

    Parameters
    ----------
    queries, policies, traffic : sequence of str
        The sweep's axes (workload names, policy names, traffic patterns).
    duration_s : float
        Simulated seconds of traffic per cell.
    repeat : int
        Repetitions of each cell (repetition ``r`` uses seed ``seed + r``).
    speedup : float
        Simulated seconds per wall second (time compression).
    rate : float
        Offered rows per simulated second (the mean for random traffic).
    spread : float, optional
        Standard deviation of random traffic (default 25% of the rate).
    trigger_s : float
        The fixed policy's interval, simulated seconds (the paper's 10 s).
    output : {"noop", "parquet"}
        The sink of every cell (noop computes the result and drops it).
    warmup_s : float
        Simulated seconds of a discarded asap run of each query before its first
        measured run on a JVM (0: none).
    jvm_warmup_s : float
        Wall seconds that the first warm-up on a fresh JVM (the bench's start, a
        resume, a new session after the driver exited) lasts at least, where
        ``warmup_s`` is above 0.  The first cell after a 10 s warm-up paid for Java's
        compiler for 40-50 s on the 2-core VM.
    capacity : bool
        Also search each policy's and query's capacity.
    capacity_duration_s : float
        Simulated seconds of each capacity probe.
    capacity_start : float, optional
        First probed rate (default: ``rate``).
    capacity_probes : int
        Most probe runs per (query, policy), repetitions included (see
        :class:`~lmstream_kit.bench.capacity.CapacitySearch`: it bisects until the
        bracket [highest pass, lowest fail] is within 10% and runs each bound twice).
    capacity_max_rate : float
        Highest rate the search tries.
    capacity_min_batches : int
        Pool the runs at a rate, which fails only where more than 5% of at least this many of
        their batches were late (0: most runs decide; see
        :class:`~lmstream_kit.bench.capacity.CapacitySearch`).  20 is the fewest batches in
        which 95% within the bound leaves room for one late batch.
    capacity_budget_s : float, optional
        Wall seconds for the whole capacity search (None: no limit); after it no
        probe starts, and each unfinished (query, policy) is reported as
        ``not-converged`` with its bracket so far.
    device_mode : str
        Device mode of every stream (see :mod:`lmstream_kit.devices`; default ``advisory``).
    optimizer : bool, optional
        Run the inflection-point optimizer (default: for the ``lmstream`` policy).
    spark_conf : dict
        Extra Spark confs of the bench's session (e.g. the RAPIDS plugin's).
    overload : mapping of str to float
        Extra cells at a load of their own, ``{query: rows per simulated second}``: every
        policy runs the query once under constant traffic at that rate (``load="overload"`` in the
        results; the paper's Fig. 1 is drawn from them, and the claims compare policies per rate).
        Pick a rate above the fixed trigger's capacity, where its maximum latency grows batch
        after batch.
    at_capacity : float, optional
        With ``capacity``: after the search, every policy runs each query once more under constant
        traffic at this share of asap's capacity (the highest rate its search passed, rounded to a
        row per second; ``load="capacity"`` in the results), where the bound matters most; a query
        whose asap search passed no rate is skipped, and the bench's meta says so.  None: no such
        cells.
    tumbling_target : {"window", "paper"}
        The lmstream controller's target on tumbling queries: batch up to the window's length and
        admit at once what closes a window, or LMStream's running mean of past maximum latencies.
    service_model : {"bytes", "features"}
        The lmstream controller's service-time model.
    catch_up : {"chunks", "all"}
        How the lmstream controller admits a backlog that cannot meet the target in one batch.
    controller : mapping of str to value
        More parameters of the lmstream policy's :class:`~lmstream_kit.controller.AdmissionController`
        (:data:`CONTROLLER_KEYS`), e.g. ``{"quantile": 0.97, "min_margin_s": 0.5}`` to measure a
        margin rule; validated before anything starts.
    feed : str, optional
        ``kafka://HOST:PORT/PREFIX[?format=json|avro]``: every run (warm-ups, cells and capacity
        probes) sends its generated traffic through a topic of its own, ``PREFIX-<run>-<bench
        start>`` with ``kafka_partitions`` partitions, and streams from it.  None: the spool.  The
        same seed gives the same rows on both, so two benches compare the feeds.
    kafka_partitions : int
        Partitions of each topic of ``feed``.
    state_store : {"default", "rocksdb"}
        The state store of every run's stateful operators (:data:`~lmstream_kit.stream_config.STATE_STORES`):
        Spark's default keeps the state in the JVM's heap (the driver's, in local mode), RocksDB
        off it, in native memory and local files.
    """

    queries: Sequence[str] = ALL_QUERIES
    policies: Sequence[str] = ("lmstream", "fixed", "asap")
    traffic: Sequence[str] = ("constant", "random")
    duration_s: float = 300.0
    repeat: int = 1
    speedup: float = 4.0
    rate: float = 1000.0
    spread: Optional[float] = None
    seed: int = 0
    trigger_s: float = 10.0
    master: str = "local[2]"
    output: str = "noop"
    read: str = "auto"
    warmup_s: float = 20.0
    jvm_warmup_s: float = 45.0
    capacity: bool = False
    capacity_duration_s: float = 60.0
    capacity_start: Optional[float] = None
    capacity_probes: int = 12
    capacity_max_rate: float = 64000.0
    capacity_min_batches: int = 20
    capacity_budget_s: Optional[float] = None
    results_format: str = "parquet"
    spark_conf: dict = field(default_factory=dict)
    device_mode: str = "advisory"
    optimizer: Optional[bool] = None
    feed: Optional[str] = None
    kafka_partitions: int = 2
    overload: dict = field(default_factory=dict)
    at_capacity: Optional[float] = None
    tumbling_target: str = "window"
    catch_up: str = "chunks"
    service_model: str = "bytes"
    controller: dict = field(default_factory=dict)
    state_store: str = "default"

    def __post_init__(self) -> None:
        check_device_mode(self.device_mode)
        if self.feed is not None:
            from ..feed.kafka import parse_kafka_uri
            from ..feed.values import check_format
            from ..protocol import Param

            check_format(parse_kafka_uri(self.feed).format, writing=True)
            self.kafka_partitions = Param("kafka_partitions", int, low=1).validate(self.kafka_partitions)
        # names or your own queries (FILE.py:NAME, MODULE:NAME, Workload objects), resolved once
        self._workloads: dict[str, Workload] = {}
        for q in _names(self.queries, "queries"):
            w = load_workload(q)
            if not w.generated:
                raise ConfigError(f"workload {w.name} has no traffic generator (rows=): bench runs generated "
                                  "traffic; give the workload one, or run it on files with `run --input`")
            self._workloads[w.name] = w
        self.queries = tuple(self._workloads)
        self.policies = tuple(POLICIES.get(p).name for p in _names(self.policies, "policies"))
        self.traffic = tuple(_names(self.traffic, "traffic"))
        for t in self.traffic:
            if t not in ("constant", "random"):
                raise ConfigError(f"bench traffic must be 'constant' or 'random', got {t!r}")
        for name in ("duration_s", "speedup", "rate", "trigger_s", "capacity_duration_s", "capacity_max_rate"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ConfigError(f"{name.replace('_s', '')} must be > 0, got {value!r}")
        if not (isinstance(self.repeat, int) and self.repeat >= 1):
            raise ConfigError(f"repeat must be an integer >= 1, got {self.repeat!r}")
        if not (isinstance(self.capacity_probes, int) and self.capacity_probes >= 1):
            raise ConfigError(f"capacity probes must be an integer >= 1, got {self.capacity_probes!r}")
        if isinstance(self.capacity_min_batches, bool) or not (isinstance(self.capacity_min_batches, int)
                                                               and self.capacity_min_batches >= 0):
            raise ConfigError(f"capacity min batches must be an integer >= 0, got {self.capacity_min_batches!r}")
        if self.warmup_s < 0:
            raise ConfigError(f"warmup must be >= 0 seconds, got {self.warmup_s!r}")
        if not self.jvm_warmup_s >= 0:
            raise ConfigError(f"JVM warm-up must be >= 0 seconds, got {self.jvm_warmup_s!r}")
        if self.output not in ("noop", "parquet"):
            raise ConfigError(f"output must be 'noop' or 'parquet', got {self.output!r}")
        if self.results_format not in ("parquet", "csv"):
            raise ConfigError(f"results format must be 'parquet' or 'csv', got {self.results_format!r}")
        overload = {}
        for query, rate in dict(self.overload or {}).items():
            name = getattr(query, "name", query)
            if name not in self._workloads:
                raise ConfigError(f"overload query {query!r} is not in the sweep's queries "
                                  f"({', '.join(self._workloads)})")
            if not (isinstance(rate, (int, float)) and not isinstance(rate, bool) and math.isfinite(rate)
                    and rate > 0):
                raise ConfigError(f"overload rate of {name} must be > 0 rows per second, got {rate!r}")
            overload[name] = float(rate)
        self.overload = overload
        if self.tumbling_target not in ("window", "paper"):
            raise ConfigError(f"tumbling target must be 'window' or 'paper', got {self.tumbling_target!r}")
        if self.service_model not in ("bytes", "features"):
            raise ConfigError(f"service model must be 'bytes' or 'features', got {self.service_model!r}")
        if self.catch_up not in ("chunks", "all"):
            raise ConfigError(f"catch-up must be 'chunks' or 'all', got {self.catch_up!r}")
        self.controller = check_controller_params(self.controller)
        check_state_store(self.state_store)
        if self.capacity_start is not None and not self.capacity_start > 0:
            raise ConfigError(f"capacity start rate must be > 0, got {self.capacity_start!r}")
        share = self.at_capacity
        if share is not None and not (isinstance(share, (int, float)) and not isinstance(share, bool)
                                      and math.isfinite(share) and 0 < share <= 2):
            raise ConfigError(f"at-capacity share must be > 0 and <= 2 (of asap's capacity), got {share!r}")
        if share is not None and not self.capacity:
            raise ConfigError("at-capacity cells need the capacity search (capacity=True, bench --capacity)")
        budget = self.capacity_budget_s
        if budget is not None and not (isinstance(budget, (int, float)) and math.isfinite(budget)
                                       and budget > 0):
            raise ConfigError(f"capacity budget must be > 0 seconds, got {budget!r}")

    def topic_uri(self, run: str, stamp: str) -> Optional[str]:
        """The Kafka topic of the run named ``run`` in the bench started at ``stamp`` (None: the spool).

        >>> BenchConfig(queries=["LR2S"], feed="kafka://127.0.0.1:9092/bench?format=avro").topic_uri(
        ...     "LR2S-lmstream-constant-r0", "20261124T201500")
        'kafka://127.0.0.1:9092/bench-LR2S-lmstream-constant-r0-20261124T201500?format=avro'
        """
        if self.feed is None:
            return None
        from dataclasses import replace

        from ..feed.kafka import parse_kafka_uri

        ref = parse_kafka_uri(self.feed)
        name = re.sub(r"[^A-Za-z0-9._\-]", "_", f"{ref.topic}-{run}-{stamp}")[:249]
        return replace(ref, topic=name).uri

    def workload(self, name: str) -> Workload:
        """The Workload a query name of this bench stands for."""
        return self._workloads[name]

    def resolve_windows(self, query_window: Callable[[Workload], tuple]) -> None:
        """Read windows from the queries' plans (``window="infer"``) with the engine's ``query_window``."""
        for name, w in self._workloads.items():
            if w.window_from_plan:
                self._workloads[name] = w.with_window(*query_window(w))

    def capacity_cells(self, probes: Sequence[Mapping], queries: Optional[Sequence[str]] = None
                       ) -> tuple[list[dict], dict]:
        """The cells at :attr:`at_capacity` of asap's capacity, from the capacity search's ``probes``
        (its rows, whose last per query and policy holds the search's ``lo``), and ``{query: why}``
        for the queries it skips; ``queries``: only these of the sweep's.

        >>> cfg = BenchConfig(queries=["LR2S", "CM2S"], policies=["lmstream", "asap"], at_capacity=0.8, capacity=True)
        >>> probes = [{"query": "LR2S", "policy": "asap", "lo": 1000.0}, {"query": "LR2S", "policy": "asap", "lo": 2828.0},
        ...           {"query": "CM2S", "policy": "asap", "lo": float("nan")}]
        >>> cells, skipped = cfg.capacity_cells(probes)
        >>> [(c["query"], c["policy"], c["rate"], c["load"]) for c in cells], skipped
        ([('LR2S', 'lmstream', 2262.0, 'capacity'), ('LR2S', 'asap', 2262.0, 'capacity')], {'CM2S': "asap's capacity search passed no rate"})
        """
        if self.at_capacity is None:
            return [], {}
        lo: dict = {}
        for row in probes:
            if row.get("policy") == "asap":
                lo[row["query"]] = row.get("lo")
        cells, skipped = [], {}
        for query in self.queries if queries is None else [q for q in self.queries if q in set(queries)]:
            value = lo.get(query)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                skipped[query] = ("asap's capacity search passed no rate" if query in lo
                                  else "asap's capacity was not searched")
                continue
            rate = float(max(1, round(self.at_capacity * float(value))))
            cells += [{"query": query, "traffic": "constant", "rep": 0, "policy": p, "rate": rate, "load": "capacity"}
                      for p in self.policies]
        return cells, skipped

    def cells(self) -> list[dict]:
        """The sweep's cells in run order: policies of one (query, traffic, rep) back to back, then the
        overload cells (constant traffic, repetition 0) of each query that has one.

        >>> cells = BenchConfig(queries=["LR2S"], policies=["fixed", "lmstream"], traffic=["constant"],
        ...                     overload={"LR2S": 2000}).cells()
        >>> [(c["policy"], c["rate"], c["load"]) for c in cells]
        [('fixed', 1000.0, 'sweep'), ('lmstream', 1000.0, 'sweep'), ('fixed', 2000.0, 'overload'), ('lmstream', 2000.0, 'overload')]
        """
        sweep = [
            {"query": q, "traffic": t, "rep": r, "policy": p, "rate": float(self.rate), "load": "sweep"}
            for q in self.queries
            for r in range(self.repeat)
            for t in self.traffic
            for p in self.policies
        ]
        overload = [
            {"query": q, "traffic": "constant", "rep": 0, "policy": p, "rate": rate, "load": "overload"}
            for q, rate in self.overload.items()
            for p in self.policies
        ]
        return sweep + overload


def _names(value, what: str) -> list:
    """Comma-separated text or a sequence as a list of stripped names; other objects (a Workload) kept."""
    if isinstance(value, str):
        value = value.split(",")
    names = [v.strip() if isinstance(v, str) else v for v in value if not isinstance(v, str) or v.strip()]
    if not names:
        raise ConfigError(f"bench needs at least one of {what}")
    return names


#: the lmstream controller's parameters a bench may set (``BenchConfig.controller``, ``bench --controller``);
#: the others come from the workload's window or from a bench option of their own
CONTROLLER_KEYS = ("quantile", "history", "min_margin_s", "cold_start", "interval_margin", "prior_processing_s",
                   "initial_target_s", "poll_interval_s", "warmup", "gc_margin", "heap_admit",
                   "idle_collect", "close_horizon", "row_cap", "cold_evictions", "evict_horizon", "busy_load",
                   "cold_target_s", "cold_fraction")
_CONTROLLER_OPTIONS = {"catch_up": "catch_up (bench --catch-up)", "service_model": "service_model (--service-model)",
                       "tumbling_target": "tumbling_target (--tumbling-target)"}


def check_controller_params(params: Any) -> dict:
    """``params`` checked as extra lmstream controller parameters: known keys, values the controller
    accepts; a ConfigError naming the bad key or value.

    >>> check_controller_params({"quantile": 0.97, "min_margin_s": 0.5})
    {'quantile': 0.97, 'min_margin_s': 0.5}
    >>> check_controller_params({"quantile": 1.5})
    Traceback (most recent call last):
    ...
    lmstream_kit.exceptions.ConfigError: controller quantile must be < 1, got 1.5
    >>> check_controller_params({"catch_up": "all"})
    Traceback (most recent call last):
    ...
    lmstream_kit.exceptions.ConfigError: controller parameter 'catch_up' has an option of its own: catch_up (bench --catch-up)
    """
    from ..controller import AdmissionController

    if params is None:
        return {}
    if not isinstance(params, Mapping):
        raise ConfigError(f"controller parameters must be a mapping of name to value, got {params!r}")
    params = dict(params)
    for key in params:
        if key in _CONTROLLER_OPTIONS:
            raise ConfigError(f"controller parameter {key!r} has an option of its own: {_CONTROLLER_OPTIONS[key]}")
        if key not in CONTROLLER_KEYS:
            raise ConfigError(f"unknown controller parameter {key!r}; known: {', '.join(CONTROLLER_KEYS)}")
    try:
        AdmissionController(slide_s=1.0, **params)  # its own checks, before Spark starts
    except ConfigError as exc:
        raise ConfigError(f"controller {exc}") from None
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"controller parameters {params!r}: {exc}") from None
    return params


def _config_dict(cfg: BenchConfig) -> dict:
    d = asdict(cfg)
    for key in ("queries", "policies", "traffic"):
        d[key] = list(d[key])
    return d
