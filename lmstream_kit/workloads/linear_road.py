"""Linear Road position reports: the Arrow schema and a vectorised generator.

Pure data (numpy + pyarrow, no Spark).  The generator imitates the Linear
Road benchmark's position-report stream closely enough for its queries (LR2S
keeps segments whose average speed is below 40 mph) to produce meaningful
output, while staying stateless: the rows of a second are a function of
``(second, n, rng)`` only, so any second can be regenerated on its own.

Model and distributions
-----------------------
* **Expressways** ``0..highways-1``, each 100 segments of 5280 ft in both
  directions (``position`` 0..527999 ft, ``segment = position // 5280``).
  Direction 0 travels towards higher positions, direction 1 towards lower.
* **Who reports.**  Every vehicle reports every 30 s, so the vehicles that
  report at second ``s`` are those with ``vehicle % 30 == s % 30``: the
  ``n`` reports of second ``s`` come from vehicles ``30*k + s % 30`` for
  ``k = 0..n-1`` (the same vehicles report again 30 s later).
* **Per-vehicle constants** come from a 64-bit hash (splitmix64) of the id,
  not from ``rng``: expressway (uniform), direction (uniform 0/1), a speed
  factor ``f ~ U(0.8, 1.2)`` and a starting phase ``U(0, 1)`` on the loop.
* **Congestion.**  Each (expressway, direction) has 4 jams, each 2 segments
  long, spaced 25 segments apart from a hashed offset.  Jams creep one
  segment *upstream* every 600 simulated seconds (an "epoch"), so the
  congested segments change slowly.  Free-flow segments have a base speed of
  60 mph, jammed ones 25 mph.
* **Motion.**  A vehicle drives the expressway as a loop (leaving at the end
  re-enters at the start) at ``f`` times each segment's base speed, so its
  position is the closed-form inverse of the cumulative segment travel
  times: within an epoch consecutive reports of a vehicle are exactly
  consistent with its speed; when jams move at an epoch boundary a vehicle's
  position may shift by up to about one segment.
* **Reported speed** = ``f * base speed + N(0, 2.5)`` mph, rounded and
  clipped to 0..100: free flow gives ~48-72 mph (mostly 40-80), jams
  ~20-30 mph (below 40).  About 17% of reports come from jammed segments.
* **Lane** (from ``rng``): 0 (entry ramp) with probability 0.05, 4 (exit
  ramp) 0.05, otherwise 1, 2 or 3 uniformly.

``rng`` supplies only the speed noise and the lanes, so the output is
deterministic for ``(second, n, rng state)``.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pyarrow as pa

from lmstream_kit.exceptions import ConfigError
from lmstream_kit.workloads.hashing import splitmix64 as _splitmix64

__all__ = [
    "LR_SCHEMA",
    "LR_CHECKS",
    "make_position_reports",
    "REPORT_PERIOD_S",
    "SEGMENTS",
    "SEGMENT_FT",
    "ROAD_FT",
    "EPOCH_S",
]

INT32_MAX = 2**31 - 1
REPORT_PERIOD_S = 30
SEGMENTS = 100
SEGMENT_FT = 5280
ROAD_FT = SEGMENTS * SEGMENT_FT  # 528000
EPOCH_S = 600
FREE_MPH = 60.0
JAM_MPH = 25.0
JAMS = 4
JAM_LEN = 2
JAM_SPACING = SEGMENTS // JAMS
NOISE_MPH = 2.5
_FT_PER_S_PER_MPH = 5280.0 / 3600.0

LR_SCHEMA = pa.schema(
    [
        pa.field("time", pa.int32(), nullable=False),
        pa.field("vehicle", pa.int32(), nullable=False),
        pa.field("speed", pa.int32(), nullable=False),
        pa.field("highway", pa.int32(), nullable=False),
        pa.field("lane", pa.int32(), nullable=False),
        pa.field("direction", pa.int32(), nullable=False),
        pa.field("segment", pa.int32(), nullable=False),
        pa.field("position", pa.int32(), nullable=False),
    ]
)

#: Inclusive valid ranges per column (for ingest of user files).
LR_CHECKS: dict[str, tuple[int, int]] = {
    "time": (0, INT32_MAX),
    "vehicle": (0, INT32_MAX),
    "speed": (0, 100),
    "highway": (0, INT32_MAX),
    "lane": (0, 4),
    "direction": (0, 1),
    "segment": (0, SEGMENTS - 1),
    "position": (0, ROAD_FT - 1),
}



@lru_cache(maxsize=64)
def _road_tables(highways: int, epoch: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per (expressway, direction) group: base speeds, segment times, cumulative times, loop time.

    Segments are indexed in *travel order* ``j`` (distance from the start of
    the vehicle's direction of travel).  Returns arrays of shape (G, 100),
    (G, 100), (G, 101) offset so groups do not overlap, and (G,), where
    ``G = 2 * highways`` and group ``g = 2 * highway + direction``.
    """
    groups = 2 * highways
    offsets = (_splitmix64(np.arange(groups, dtype=np.uint64) + np.uint64(0xC0FFEE)) % np.uint64(JAM_SPACING)).astype(np.int64)
    speed = np.full((groups, SEGMENTS), FREE_MPH)
    for z in range(JAMS):
        for w in range(JAM_LEN):
            # Jams move upstream (against travel) one segment per epoch.
            seg = (offsets + z * JAM_SPACING + w - epoch) % SEGMENTS
            speed[np.arange(groups), seg] = JAM_MPH
    seg_time = SEGMENT_FT / (speed * _FT_PER_S_PER_MPH)
    cum = np.zeros((groups, SEGMENTS + 1))
    np.cumsum(seg_time, axis=1, out=cum[:, 1:])
    loop = cum[:, -1].copy()
    # Offset each group's cumulative times so one searchsorted serves all groups.
    stride = float(loop.max()) * 2.0
    flat = (cum[:, :SEGMENTS] + (np.arange(groups) * stride)[:, None]).ravel()
    return speed, seg_time, flat, np.concatenate([loop, [stride]])


def make_position_reports(second: int, n: int, rng: np.random.Generator, *, highways: int = 2) -> pa.Table:
    """Return ``n`` Linear Road position reports for simulated ``second``.

    Parameters
    ----------
    second : int
        Simulated second (>= 0); becomes the ``time`` column.
    n : int
        Number of reports (>= 0).
    rng : numpy.random.Generator
        Source of the speed noise and lane choice.
    highways : int
        Number of expressways L (>= 1).

    Returns
    -------
    pyarrow.Table
        ``n`` rows in :data:`LR_SCHEMA`.
    """
    if second < 0:
        raise ConfigError(f"second must be >= 0, got {second}")
    if n < 0:
        raise ConfigError(f"n must be >= 0, got {n}")
    if highways < 1:
        raise ConfigError(f"highways must be >= 1, got {highways}")
    second, n, highways = int(second), int(n), int(highways)

    vehicle = np.arange(n, dtype=np.int64) * REPORT_PERIOD_S + (second % REPORT_PERIOD_S)
    h = _splitmix64(vehicle.astype(np.uint64))
    highway = (h % np.uint64(highways)).astype(np.int64)
    direction = ((h >> np.uint64(32)) & np.uint64(1)).astype(np.int64)
    factor = 0.8 + 0.4 * ((h >> np.uint64(33)) & np.uint64(0xFFFFF)).astype(np.float64) / float(1 << 20)
    phase = ((h >> np.uint64(53)) & np.uint64(0x7FF)).astype(np.float64) / float(1 << 11)

    speed_tab, seg_time, flat_cum, loop_ext = _road_tables(highways, second // EPOCH_S)
    group = 2 * highway + direction
    loop = loop_ext[:-1][group]
    stride = loop_ext[-1]
    # Travel time into the loop at unit speed factor: a faster vehicle (f > 1)
    # covers the same segments in 1/f of the time.
    tau = np.mod(phase * loop + factor * second, loop)
    idx = np.searchsorted(flat_cum, tau + group * stride, side="right") - 1
    jseg = idx - group * SEGMENTS
    np.clip(jseg, 0, SEGMENTS - 1, out=jseg)
    start = flat_cum[idx] - group * stride
    frac = np.clip((tau - start) / seg_time[group, jseg], 0.0, 1.0 - 1e-9)
    travel_ft = np.minimum(((jseg + frac) * SEGMENT_FT).astype(np.int64), ROAD_FT - 1)
    position = np.where(direction == 0, travel_ft, ROAD_FT - 1 - travel_ft)

    base = speed_tab[group, jseg] * factor
    speed = np.clip(np.rint(base + rng.normal(0.0, NOISE_MPH, n)), 0, 100)
    u = rng.random(n)
    lane = np.where(u < 0.05, 0, np.where(u < 0.10, 4, 1 + (rng.integers(0, 3, n))))

    i32 = np.int32
    return pa.Table.from_arrays(
        [
            pa.array(np.full(n, second, dtype=i32)),
            pa.array(vehicle.astype(i32)),
            pa.array(speed.astype(i32)),
            pa.array(highway.astype(i32)),
            pa.array(lane.astype(i32)),
            pa.array(direction.astype(i32)),
            pa.array((position // SEGMENT_FT).astype(i32)),
            pa.array(position.astype(i32)),
        ],
        schema=LR_SCHEMA,
    )
