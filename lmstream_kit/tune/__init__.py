"""Parallelism tuning (StreamTune on Spark): operator metrics from Spark itself, and, built on them,
the tuners.  Plain Python; the engine layer reads the stages (``lmstream_kit.engine.stages``)."""

from .operators import OperatorMetrics, OperatorSample, operator_samples

__all__ = ["OperatorMetrics", "OperatorSample", "operator_samples"]
