"""LANES: reports per lane in 20 s tumbling windows, a query of our own (not a built-in).

Run it:   lmstream-kit run --workload examples/lanes.py:LANES --duration 60 --speedup 4
On files: lmstream-kit run --workload examples/lanes.py:LANES --input landing/ --duration 60
"""

import numpy as np
import pandas as pd

from lmstream_kit import define_workload

#: the generated traffic's simulated second 0, as a real event time
EPOCH = pd.Timestamp("2026-01-01", tz="UTC")


def lane_reports(second, n, rng):
    """``n`` speed reports on four lanes, stamped within simulated second ``second``."""
    offsets = np.sort(rng.uniform(0.0, 1.0, n))
    return pd.DataFrame({
        "lane": rng.integers(1, 5, n).astype("int32"),
        "ts": EPOCH + pd.to_timedelta(second + offsets, unit="s"),
        "speed": rng.normal(90.0, 15.0, n).clip(0.0, 200.0),
    })


@define_workload(
    schema="lane INT, ts TIMESTAMP, speed DOUBLE",
    window="20 seconds",                   # tumbling: the latency bound is 20 s (over the speedup)
    event_time="ts", watermark="5 seconds",
    rows=lane_reports,                     # optional: without it, run on files with --input DIR
    checks={"lane": {1, 2, 3, 4}, "speed": (0, 250)},
)
def LANES(stream):
    """Reports and mean speed per lane in 20 s tumbling windows."""
    from pyspark.sql import functions as F

    per_lane = stream.groupBy(F.window("ts", "20 seconds"), "lane").agg(
        F.count("*").alias("reports"), F.avg("speed").alias("avg_speed"))
    return per_lane.select(F.col("window.start").alias("window_start"), "lane", "reports", "avg_speed")
