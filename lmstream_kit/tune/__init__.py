"""Parallelism tuning (StreamTune on Spark): operator metrics from Spark itself, a history store of them
across runs, and, built on them, the tuners.  Plain Python; the engine layer reads the stages
(``lmstream_kit.engine.stages``)."""

from .history import (
    History,
    HistoryRecorder,
    HistoryWriter,
    dag_fingerprint,
    default_store,
    read_history,
    stage_dag,
)
from .knobs import MAX_INPUT_PARTITIONS, InputPartitions
from .operators import OperatorMetrics, OperatorSample, operator_samples

__all__ = [
    "History",
    "HistoryRecorder",
    "HistoryWriter",
    "InputPartitions",
    "MAX_INPUT_PARTITIONS",
    "OperatorMetrics",
    "OperatorSample",
    "dag_fingerprint",
    "default_store",
    "operator_samples",
    "read_history",
    "stage_dag",
]
