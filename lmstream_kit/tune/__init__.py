"""Parallelism tuning (StreamTune on Spark): operator metrics from Spark itself, a history store of them
across runs, and, built on them, the tuners.  Plain Python; the engine layer reads the stages
(``lmstream_kit.engine.stages``)."""

from .costmodel import CostModel
from .history import (
    SEED_STORE,
    History,
    HistoryRecorder,
    HistoryWriter,
    dag_fingerprint,
    default_store,
    read_history,
    stage_dag,
)
from .ds2 import ds2_parallelism
from .executors import ClusterExecutors
from .knobs import MAX_INPUT_PARTITIONS, ExplorePartitions, InputPartitions
from .operators import OperatorMetrics, OperatorSample, operator_samples
from .pretrain import dag_distance, history_transitions, similar_fingerprints, stage_graph
from .predictor import BottleneckModel, Transition, transitions
from .stagesim import DAGS, DagSpec, StageSpec, load_calibration, oracle_parallelism, simulate_batch, simulate_stream
from .tuner import SOURCE_STAGE, ParallelismTuner

__all__ = [
    "SEED_STORE",
    "CostModel",
    "DAGS",
    "DagSpec",
    "StageSpec",
    "load_calibration",
    "oracle_parallelism",
    "simulate_batch",
    "simulate_stream",
    "BottleneckModel",
    "ClusterExecutors",
    "ParallelismTuner",
    "SOURCE_STAGE",
    "Transition",
    "dag_distance",
    "ds2_parallelism",
    "history_transitions",
    "similar_fingerprints",
    "stage_graph",
    "transitions",
    "History",
    "HistoryRecorder",
    "HistoryWriter",
    "ExplorePartitions",
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
