"""Google cluster trace ``task_events``: the Arrow schema and a vectorised generator.

Pure data (numpy + pyarrow, no Spark).  The generator imitates the
``task_events`` table of the Google cluster-usage trace (Reiss, Wilkes and
Hellerstein, 2011) closely enough for the paper's Cluster Monitoring queries
(CM1S sums ``cpu`` per category; CM2S keeps ``event_type == 1`` (SCHEDULE)
and averages ``cpu`` per job) to produce meaningful groupings, while staying
stateless: the rows of a second are a function of ``(second, n, rng)`` only,
so any second can be regenerated on its own.

Model and distributions
-----------------------
* **Epochs and jobs.**  Simulated time is cut into epochs of 600 s.  Each
  epoch ``e`` has a fresh pool of ``jobs`` jobs (default 3000) with ids
  ``JOB_ID_BASE + e * jobs + k`` for ``k = 0..jobs-1``; which id gets which
  popularity rank is a hashed permutation, so ids are not ordered by size.
* **Skewed job sizes.**  Each event picks its job's rank ``r`` (0-based) with
  probability proportional to ``(r + 1) ** -1.1`` (Zipf-like, from ``rng``):
  with 3000 jobs the top 10% of jobs own about 80% of the events and the
  most popular job about 16%.  A job's size (number of tasks) is
  ``max(1, floor(20000 * (r + 1) ** -1.1 * u))`` with ``u ~ U(0.5, 1.5)``
  hashed from the job id, and ``task_index ~ U{0, size - 1}`` (from ``rng``).
* **Per-job constants** come from a 64-bit hash (splitmix64) of the job id,
  not from ``rng``:

  - ``user``: ``"u%04d"`` with the index uniform over ``users`` (default 300);
  - ``scheduling_class`` 0..3 with probabilities 0.55, 0.25, 0.15, 0.05;
  - ``priority`` 0..11, skewed low (0: 0.30, 1: 0.20, 2: 0.15, 3: 0.05,
    4: 0.12, 5: 0.03, 6: 0.02, 7: 0.02, 8: 0.03, 9: 0.06, 10: 0.01,
    11: 0.01);
  - requests, lognormal (Box-Muller on hashed uniforms): ``cpu`` median
    0.025 with log-sd 0.9 (about 94% of jobs below 0.1); ``memory`` median
    0.02, log-sd 0.9, log-correlated 0.6 with cpu; ``disk`` median 0.0004,
    log-sd 0.7.

* **Per-task constants** come from a hash of ``(job id, task_index)``: a
  jitter factor ``U(0.9, 1.1)`` on each of cpu, memory and disk (so all the
  events of a task carry the same requests), and the machine the task runs
  on, ``1..machines`` (default 12500, the trace's cluster size).  Requests
  are clipped to ``[1e-6, 1]`` and rounded to 6 decimals.
* **Event type** (from ``rng``, per event), numbered as in the trace:
  SUBMIT 0.290, SCHEDULE 0.310, EVICT 0.020, FAIL 0.030, FINISH 0.300,
  KILL 0.040, LOST 0.002, UPDATE_PENDING 0.002, UPDATE_RUNNING 0.006
  (:data:`EVENT_MIX`).
* **machine_id 0 means "no machine"**: the events of a pending task
  (SUBMIT and UPDATE_PENDING) have ``machine_id == 0``, the trace's missing
  machine id; every other event has the task's machine, ``>= 1``.
* ``time`` is ``second`` for all rows of that second.

``rng`` supplies only the job ranks, task indices and event types, so the
output is deterministic for ``(second, n, rng state)``.

Size: 1000 rows (11 columns) weigh 74,328 bytes as an uncompressed Arrow IPC
stream, schema message included (measured for ``make_task_events(0, 1000,
np.random.default_rng(0))``), i.e. about 74 KB, against the paper's
150-200 KB for 1000 rows of its cluster monitoring dataset, which carries
more of the trace's columns.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pyarrow as pa

from lmstream_kit.exceptions import ConfigError
from lmstream_kit.workloads.hashing import splitmix64 as _splitmix64

__all__ = [
    "CM_CHECKS",
    "CM_SCHEMA",
    "EPOCH_S",
    "EVENT_MIX",
    "EVENT_TYPES",
    "JOBS_PER_EPOCH",
    "JOB_ID_BASE",
    "MACHINES",
    "USERS",
    "make_task_events",
]

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
EPOCH_S = 600
JOBS_PER_EPOCH = 3000
MACHINES = 12500
USERS = 300
JOB_ID_BASE = 6_000_000_000
ZIPF_S = 1.1
MAX_TASKS = 20000

#: Event type names, indexed by the ``event_type`` code of the trace.
EVENT_TYPES: tuple[str, ...] = (
    "SUBMIT",
    "SCHEDULE",
    "EVICT",
    "FAIL",
    "FINISH",
    "KILL",
    "LOST",
    "UPDATE_PENDING",
    "UPDATE_RUNNING",
)
#: Probability of each event type (same order as :data:`EVENT_TYPES`).
EVENT_MIX: tuple[float, ...] = (0.290, 0.310, 0.020, 0.030, 0.300, 0.040, 0.002, 0.002, 0.006)
_PENDING = (EVENT_TYPES.index("SUBMIT"), EVENT_TYPES.index("UPDATE_PENDING"))
_CLASS_P = (0.55, 0.25, 0.15, 0.05)
_PRIORITY_P = (0.30, 0.20, 0.15, 0.05, 0.12, 0.03, 0.02, 0.02, 0.03, 0.06, 0.01, 0.01)

CM_SCHEMA = pa.schema(
    [
        pa.field("time", pa.int64(), nullable=False),
        pa.field("job_id", pa.int64(), nullable=False),
        pa.field("task_index", pa.int32(), nullable=False),
        pa.field("machine_id", pa.int64(), nullable=False),
        pa.field("event_type", pa.int32(), nullable=False),
        pa.field("user", pa.string(), nullable=False),
        pa.field("scheduling_class", pa.int32(), nullable=False),
        pa.field("priority", pa.int32(), nullable=False),
        pa.field("cpu", pa.float64(), nullable=False),
        pa.field("memory", pa.float64(), nullable=False),
        pa.field("disk", pa.float64(), nullable=False),
    ]
)

#: Inclusive valid ranges per column (for ingest of user files).
CM_CHECKS: dict[str, tuple[float, float]] = {
    "time": (0, INT64_MAX),
    "job_id": (0, INT64_MAX),
    "task_index": (0, INT32_MAX),
    "machine_id": (0, INT64_MAX),
    "event_type": (0, len(EVENT_TYPES) - 1),
    "scheduling_class": (0, len(_CLASS_P) - 1),
    "priority": (0, len(_PRIORITY_P) - 1),
    "cpu": (0.0, 1.0),
    "memory": (0.0, 1.0),
    "disk": (0.0, 1.0),
}

_U53 = float(1 << 53)


def _unit(h: np.ndarray) -> np.ndarray:
    """Uniform float64 in [0, 1) from the top 53 bits of a hash."""
    return (h >> np.uint64(11)).astype(np.float64) / _U53


def _hash_uniforms(key: np.ndarray, k: int) -> list[np.ndarray]:
    """``k`` independent uniforms in (0, 1) per key: a chain of splitmix64 draws."""
    out = []
    h = key.astype(np.uint64)
    for _ in range(k):
        h = _splitmix64(h)
        out.append(np.maximum(_unit(h), 1.0 / _U53))  # (0, 1): safe for log()
    return out


def _choice(u: np.ndarray, probs: tuple[float, ...]) -> np.ndarray:
    """Categorical index for uniforms ``u`` given probabilities ``probs``."""
    cdf = np.cumsum(probs)
    return np.minimum(np.searchsorted(cdf, u * cdf[-1], side="right"), len(probs) - 1)


@lru_cache(maxsize=8)
def _zipf_cdf(jobs: int) -> np.ndarray:
    """Normalised cumulative popularity of ranks ``0..jobs-1``."""
    w = np.arange(1, jobs + 1, dtype=np.float64) ** -ZIPF_S
    cdf = np.cumsum(w)
    return cdf / cdf[-1]


@lru_cache(maxsize=8)
def _user_names(users: int) -> pa.Array:
    return pa.array([f"u{i:04d}" for i in range(users)], type=pa.string())


@lru_cache(maxsize=16)
def _job_table(epoch: int, jobs: int, users: int) -> dict[str, np.ndarray]:
    """Per-rank constants of an epoch's job pool (arrays of length ``jobs``, indexed by rank)."""
    slot = np.arange(jobs, dtype=np.uint64)
    # Hashed permutation: rank -> job id slot, so ids are not ordered by popularity.
    salt = _splitmix64(np.array([epoch], dtype=np.uint64) + np.uint64(0xC1A55))
    order = np.argsort(_splitmix64(slot ^ salt), kind="stable")
    job_id = np.int64(JOB_ID_BASE) + np.int64(epoch) * np.int64(jobs) + order.astype(np.int64)
    u_size, u_user, u_class, u_prio, a, b, c, d = _hash_uniforms(job_id.astype(np.uint64), 8)
    rank = np.arange(1, jobs + 1, dtype=np.float64)
    size = np.maximum(1, np.floor(MAX_TASKS * rank**-ZIPF_S * (0.5 + u_size))).astype(np.int64)
    z1 = np.sqrt(-2.0 * np.log(a)) * np.cos(2.0 * np.pi * b)
    z2 = np.sqrt(-2.0 * np.log(a)) * np.sin(2.0 * np.pi * b)
    z3 = np.sqrt(-2.0 * np.log(c)) * np.cos(2.0 * np.pi * d)
    return {
        "job_id": job_id,
        "key": _splitmix64(job_id.astype(np.uint64) ^ np.uint64(0x7A5C)),
        "size": size,
        "user": np.minimum((u_user * users).astype(np.int64), users - 1),
        "scheduling_class": _choice(u_class, _CLASS_P),
        "priority": _choice(u_prio, _PRIORITY_P),
        "cpu": np.exp(np.log(0.025) + 0.9 * z1),
        "memory": np.exp(np.log(0.02) + 0.9 * (0.6 * z1 + 0.8 * z2)),
        "disk": np.exp(np.log(0.0004) + 0.7 * z3),
    }


def _request(job_value: np.ndarray, jitter_u: np.ndarray) -> np.ndarray:
    return np.round(np.clip(job_value * (0.9 + 0.2 * jitter_u), 1e-6, 1.0), 6)


def make_task_events(
    second: int,
    n: int,
    rng: np.random.Generator,
    *,
    jobs: int = JOBS_PER_EPOCH,
    machines: int = MACHINES,
    users: int = USERS,
) -> pa.Table:
    """Return ``n`` cluster-trace task events for simulated ``second``.

    Parameters
    ----------
    second : int
        Simulated second (>= 0); becomes the ``time`` column.
    n : int
        Number of events (>= 0).
    rng : numpy.random.Generator
        Source of the job ranks, task indices and event types.
    jobs : int
        Jobs in each 600 s epoch's pool (>= 1).
    machines : int
        Machines in the cluster (>= 1); ``machine_id`` is ``1..machines``,
        or 0 for the events of pending tasks.
    users : int
        Distinct user names (1..10000).

    Returns
    -------
    pyarrow.Table
        ``n`` rows in :data:`CM_SCHEMA`.

    Examples
    --------
    >>> t = make_task_events(0, 5, np.random.default_rng(0))
    >>> t.num_rows, t.schema.equals(CM_SCHEMA), t.column("time").to_pylist()
    (5, True, [0, 0, 0, 0, 0])
    >>> make_task_events(0, 5, np.random.default_rng(0)).equals(t)
    True
    """
    if second < 0:
        raise ConfigError(f"second must be >= 0, got {second}")
    if n < 0:
        raise ConfigError(f"n must be >= 0, got {n}")
    if jobs < 1:
        raise ConfigError(f"jobs must be >= 1, got {jobs}")
    if machines < 1:
        raise ConfigError(f"machines must be >= 1, got {machines}")
    if not 1 <= users <= 10000:
        raise ConfigError(f"users must be between 1 and 10000, got {users}")
    second, n, jobs, machines, users = int(second), int(n), int(jobs), int(machines), int(users)

    tab = _job_table(second // EPOCH_S, jobs, users)
    rank = np.minimum(np.searchsorted(_zipf_cdf(jobs), rng.random(n), side="right"), jobs - 1)
    task = rng.integers(0, tab["size"][rank])
    event = _choice(rng.random(n), EVENT_MIX)

    # Per-task constants: a hash of (job, task_index).
    h = _splitmix64(tab["key"][rank] + task.astype(np.uint64))
    machine = (h % np.uint64(machines)).astype(np.int64) + 1
    machine[np.isin(event, _PENDING)] = 0
    j_cpu, j_mem, j_disk = _hash_uniforms(h, 3)

    i32 = np.int32
    return pa.Table.from_arrays(
        [
            pa.array(np.full(n, second, dtype=np.int64)),
            pa.array(tab["job_id"][rank]),
            pa.array(task.astype(i32)),
            pa.array(machine),
            pa.array(event.astype(i32)),
            _user_names(users).take(pa.array(tab["user"][rank])),
            pa.array(tab["scheduling_class"][rank].astype(i32)),
            pa.array(tab["priority"][rank].astype(i32)),
            pa.array(_request(tab["cpu"][rank], j_cpu)),
            pa.array(_request(tab["memory"][rank], j_mem)),
            pa.array(_request(tab["disk"][rank], j_disk)),
        ],
        schema=CM_SCHEMA,
    )
