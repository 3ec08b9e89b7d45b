"""Build a stream's feed: the generator of a traffic pattern, or the ingest of a directory.

A resumed generator continues the simulated clock after the spool's last dataset, or where its
Kafka topic ends.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from .spool import Spool
from .traffic import FeedGenerator, Traffic

__all__ = ["make_feed", "next_generator_second"]


def make_feed(workload: Any, spool: Spool, *, input_dir: Optional[Path], traffic: Optional[Traffic],
              speedup: float, seed: int, duration_s: Optional[float], run_dir: Path, kafka: Any = None):
    """The feed of ``workload`` into ``spool`` (not started): ingest of ``input_dir``, the index of a
    Kafka topic (``kafka``, a TopicRef) with the generated traffic written to it (none without
    ``traffic``), else generated traffic."""
    if kafka is not None:
        from .kafka import KafkaFeed, TopicSink, TopicWriter, generated_tail

        if traffic is None:
            return KafkaFeed(spool)
        # the topic exists: LiveStream.start made it (with kafka_partitions) before Spark started.  The
        # generator goes on where the topic ends: the last second it holds is made again, and only the
        # rows the topic lacks are written (all of them were unless a generator was killed meanwhile)
        tail = generated_tail(kafka)
        sink = TopicSink(TopicWriter(kafka), written=None if tail is None else {tail[0]: tail[1]})
        generator = FeedGenerator(sink, traffic, workload.make_rows, speedup=speedup, seed=seed,
                                  duration_s=duration_s, start_second=0 if tail is None else tail[0])
        return KafkaFeed(spool, generator=generator, sink=sink)
    if input_dir is not None:
        from .ingest import DirectoryIngest

        return DirectoryIngest(input_dir, spool, checks=workload.checks, dead_letter=Path(run_dir) / "dead_letter.jsonl")
    return FeedGenerator(spool, traffic, workload.make_rows, speedup=speedup, seed=seed, duration_s=duration_s,
                         start_second=next_generator_second(spool, workload.time_column))


def next_generator_second(spool: Spool, time_column: Optional[str]) -> int:
    """The simulated second after the spool's last dataset (0 for an empty spool).

    The generator writes each dataset's second into the spool's index; spools
    written before it did are read by their numeric ``time_column``.
    """
    if spool.end_seq == 0:
        return 0
    last = spool.datasets(spool.end_seq - 1)[0]
    if last.second is not None:
        return last.second + 1
    if time_column is None:
        return 0
    table = spool.read_table(spool.end_seq - 1, spool.end_seq)
    if table.num_rows == 0:
        return 0
    import pyarrow.compute as pc

    return int(pc.max(table[time_column]).as_py()) + 1


def write_backlog(spool_dir: Path, workload: Any, *, seconds: int, rate: int, speedup: float = 1.0,
                  seed: int = 0, now: Optional[float] = None) -> int:
    """The spool of a stream that was down while its input kept landing; returns the datasets written.

    ``seconds`` simulated seconds of the workload's generated rows (``rate`` a second), the last one
    arriving at ``now`` (default: the clock) and the others ``1 / speedup`` wall seconds apart before
    it, each with its generator second, so a stream started on the spool resumes the generator after
    them.  A spool that holds datasets already (a run that was stopped) goes on after its last
    generator second.  For the catch-up benchmark and notebook.
    """
    import time

    import numpy as np

    if workload.make_rows is None:
        from ..exceptions import ConfigError

        raise ConfigError(f"workload {workload.name} has no traffic generator (rows=): no backlog to write")
    spool = Spool(Path(spool_dir), schema=workload.schema)
    rng = np.random.default_rng(seed)
    end = time.time() if now is None else float(now)
    first = next_generator_second(spool, workload.time_column)
    try:
        for i in range(int(seconds)):
            spool.append(workload.make_rows(first + i, int(rate), rng), arrival=end - (seconds - 1 - i) / speedup,
                         source="generator", second=first + i)
    finally:
        spool.close()
    return int(seconds)
