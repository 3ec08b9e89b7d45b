"""A stream's configuration, validated before anything starts: every bad value is one ConfigError.

>>> cfg = StreamConfig.build("LR2S", policy="fixed", rate=500, speedup=4, run_dir="/tmp/x")
>>> cfg.workload.name, cfg.policy.trigger_s, cfg.slide_s, cfg.spool_location
('LR2S', 10.0, 10.0, '/tmp/x/spool')
>>> StreamConfig.build("LR2S", output="csv")
Traceback (most recent call last):
...
lmstream_kit.exceptions.ConfigError: output must be 'parquet' or 'noop', got 'csv'
"""

from __future__ import annotations

import math
import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .exceptions import ConfigError
from .feed.traffic import Traffic, traffic_from_spec
from .policies import Policy, get_policy
from .protocol import Param
from .workloads import Workload, load_workload

__all__ = ["MASTER_FORMS", "STATE_STORES", "StreamConfig", "check_master", "check_state_store"]


def _positive(name: str, value: Any, *, allow_none: bool = False) -> float | None:
    if value is None and allow_none:
        return None
    return Param(name, float, low=0, low_open=True).validate(value)


#: the master URLs Spark 4 takes (SparkContext's master regexes, the standalone URL check, YARN, Kubernetes)
MASTER_FORMS = ("local, local[N], local[*], local[N,F], local-cluster[N,C,M], "
                "spark://HOST:PORT[,HOST:PORT...], yarn or k8s://[https://]HOST:PORT")

_LOCAL_N = re.compile(r"local\[([0-9]+|\*)\]")
_LOCAL_N_FAILURES = re.compile(r"local\[([0-9]+|\*)\s*,\s*([0-9]+)\]")
_LOCAL_CLUSTER = re.compile(r"local-cluster\[\s*([0-9]+)\s*,\s*([0-9]+)\s*,\s*([0-9]+)\s*\]")
# what java.net.URI takes as a host: a DNS name, an IPv4 address or an IPv6 one in brackets
_HOST_PORT = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?):([0-9]{1,5})")


def _master_problem(master: str) -> str | None:
    """Why Spark would refuse ``master``: a reason, '' when it is no form Spark knows; None: it is fine."""
    if master in ("local", "yarn"):
        return None
    m = _LOCAL_N.fullmatch(master) or _LOCAL_N_FAILURES.fullmatch(master)
    if m:  # local[N,F]: F is the task failures Spark tolerates (it takes 0 as 1)
        return None if m.group(1) == "*" or int(m.group(1)) >= 1 else "local needs at least 1 thread"
    m = _LOCAL_CLUSTER.fullmatch(master)
    if m:
        return None if all(int(g) >= 1 for g in m.groups()) else \
            "local-cluster[N,C,M] needs at least 1 worker, 1 core and 1 MiB"
    if master.startswith("spark://"):
        for part in master[len("spark://"):].split(","):
            hp = _HOST_PORT.fullmatch(part)
            if hp is None or not 1 <= int(hp.group(2)) <= 65535:
                return f"{part!r} is not HOST:PORT (port 1-65535)"
        return None
    if master.startswith("k8s://"):
        rest = master[len("k8s://"):]
        scheme, sep, address = rest.partition("://")
        if not sep:
            scheme, address = "https", rest
        if scheme.lower() not in ("http", "https"):
            return f"a Kubernetes API server is reached over http or https, not {scheme!r}"
        return None if address and not address.startswith("/") else ""
    if master.startswith("mesos://"):
        return "Spark 4 removed Mesos support"
    if master in ("yarn-client", "yarn-cluster"):
        return "Spark 3 replaced it by yarn (with spark.submit.deployMode)"
    return ""


#: ``state_store=`` choices: Spark's default (HDFS-backed) store, or RocksDB
STATE_STORES = ("default", "rocksdb")


def check_state_store(state_store: str) -> str:
    """``state_store`` when it names a state store the kit can start a query on; else a ConfigError.

    >>> check_state_store("rocksdb")
    'rocksdb'
    >>> check_state_store("lsm")
    Traceback (most recent call last):
    ...
    lmstream_kit.exceptions.ConfigError: state_store must be 'default' or 'rocksdb', got 'lsm'
    """
    if state_store not in STATE_STORES:
        raise ConfigError(f"state_store must be 'default' or 'rocksdb', got {state_store!r}")
    return state_store


def check_master(master: str) -> str:
    """``master`` when Spark takes it as a master URL; else a ConfigError, one line naming it and the forms.

    A pure check (it imports no pyspark): run before Spark starts, it turns what would be a JVM's
    stack trace into one line.

    >>> check_master("local[4]"), check_master("spark://h1:7077,h2:7077")
    ('local[4]', 'spark://h1:7077,h2:7077')
    >>> check_master("local[0]")
    Traceback (most recent call last):
    ...
    lmstream_kit.exceptions.ConfigError: could not start Spark (master local[0]): local needs at least 1 ...
    """
    why = _master_problem(master) if isinstance(master, str) else ""
    if why is None:
        return master
    # as given, quoted where it is empty or has spaces (which Spark does not strip)
    shown = master if isinstance(master, str) and re.fullmatch(r"\S+", master) else repr(master)
    raise ConfigError(f"could not start Spark (master {shown}): {why or 'not a master URL Spark knows'}; "
                      f"use {MASTER_FORMS}")


@dataclass(frozen=True)
class StreamConfig:
    """What a LiveStream runs: the query, the policy, the input and where its files go."""

    workload: Workload
    policy: Policy
    traffic: Traffic | None
    traffic_spec: str
    rate: float
    speedup: float
    seed: int
    duration_s: float | None
    slide_s: float
    output: str
    read_mode: str
    master: str
    partitions: int
    input_dir: Path | None
    run_dir: Path
    spool_location: str
    name: str
    kafka: Any = None  # a TopicRef: the stream reads this topic (lmstream_kit.feed.kafka)
    kafka_partitions: int = 2
    fail_on_data_loss: bool = True

    @classmethod
    def build(cls, workload: str | Workload = "LR2S", *, policy: str = "lmstream", traffic: str | Traffic = "random",
              rate: float = 1000, spread: float | None = None, speedup: float = 1.0, seed: int = 0,
              duration_s: float | None = None, run_dir: str | Path | None = None,
              input_dir: str | Path | None = None, spool: str | Path | None = None, master: str = "local[2]",
              trigger_s: float | None = None, slide_s: float | None = None, output: str = "parquet",
              read: str = "auto", partitions: int = 2, name: str | None = None, kafka: str | None = None,
              kafka_partitions: int = 2, fail_on_data_loss: bool = True) -> StreamConfig:
        """Validate the arguments of :class:`~lmstream_kit.live.LiveStream` (see its parameters)."""
        workload = load_workload(workload)
        if isinstance(trigger_s, float) and not math.isfinite(trigger_s):  # Spark takes whole milliseconds
            raise ConfigError(f"trigger must be a finite number of seconds, got {trigger_s!r}")
        policy = get_policy(policy, trigger_s=trigger_s)
        rate = _positive("rate", rate)
        speedup = _positive("speedup", speedup)
        duration_s = _positive("duration", duration_s, allow_none=True)
        if slide_s is not None and not (isinstance(slide_s, (int, float)) and slide_s >= 0):
            raise ConfigError(f"slide must be >= 0 seconds (0 = tumbling), got {slide_s}")
        if output not in ("parquet", "noop"):
            raise ConfigError(f"output must be 'parquet' or 'noop', got {output!r}")
        if read not in ("auto", "driver", "executors"):
            raise ConfigError(f"read must be 'auto', 'driver' or 'executors', got {read!r}")
        if not isinstance(fail_on_data_loss, bool):
            raise ConfigError(f"fail_on_data_loss must be True or False, got {fail_on_data_loss!r}")
        topic = None
        if kafka is not None:
            from .feed.kafka import parse_kafka_uri

            topic = parse_kafka_uri(kafka)
            if input_dir is not None:
                raise ConfigError("a stream reads either a Kafka topic or an input directory, not both")
            kafka_partitions = Param("kafka_partitions", int, low=1).validate(kafka_partitions)
        elif traffic is None:
            raise ConfigError("traffic=None (no generator) is for a Kafka topic that others write to: give kafka=")
        input_dir = Path(input_dir) if input_dir is not None else None
        if input_dir is not None and not input_dir.is_dir():
            what = "is a file, not a directory" if input_dir.exists() else "does not exist"
            raise ConfigError(f"input directory {input_dir} {what}")
        if input_dir is None and not workload.generated and not (topic is not None and traffic is None):
            raise ConfigError(f"workload {workload.name} has no traffic generator (rows=): run it on your files "
                              "with input_dir=DIR (CLI: --input DIR)")
        if isinstance(traffic, Traffic):
            generated = traffic
        elif traffic is None:
            generated = None
        elif input_dir is None:
            generated = traffic_from_spec(str(traffic), rate=rate, spread=spread, seed=int(seed))
        else:
            generated = None
        if run_dir is None:
            import tempfile

            run_dir = tempfile.mkdtemp(prefix="lmstream-run-")
        run_dir = Path(run_dir)
        return cls(
            workload=workload, policy=policy, traffic=generated,
            traffic_spec=traffic if isinstance(traffic, str) else "none" if traffic is None else getattr(
                traffic, "name", "custom"),
            rate=rate, speedup=speedup, seed=int(seed), duration_s=duration_s,
            slide_s=float(workload.slide_s if slide_s is None else slide_s), output=output, read_mode=read,
            master=master, partitions=int(partitions), input_dir=input_dir, run_dir=run_dir,
            spool_location=str(spool) if spool is not None else str(run_dir / "spool"),
            name=name or f"{workload.name}-{policy.name}-{uuid.uuid4().hex[:6]}",
            kafka=topic, kafka_partitions=int(kafka_partitions), fail_on_data_loss=fail_on_data_loss,
        )
