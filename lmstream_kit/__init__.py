"""lmstream_kit: see and tune the latency/throughput trade-off of Spark micro-batch streams.

The decision logic (``controller``, ``policies``, ``sim``) is plain Python;
everything that touches Spark lives in ``lmstream_kit.engine``.  ``LiveStream``
is imported lazily so that ``import lmstream_kit`` stays cheap and works
without pyspark.
"""

__version__ = "0.1.0"

__all__ = [
    "LiveStream",
    "AdmissionController",
    "SparkEngine",
    "Workload",
    "attach",
    "define_workload",
    "load_metrics",
    "__version__",
]


def __getattr__(name):
    if name == "LiveStream":
        from .live import LiveStream

        return LiveStream
    if name == "SparkEngine":
        from .engine.adapter import SparkEngine

        return SparkEngine
    if name == "AdmissionController":
        from .controller import AdmissionController

        return AdmissionController
    if name == "attach":
        from .attached import attach

        return attach
    if name in ("define_workload", "Workload"):
        from . import workloads

        return getattr(workloads, name)
    if name == "load_metrics":
        from .metrics import load_metrics

        return load_metrics
    raise AttributeError(f"module 'lmstream_kit' has no attribute {name!r}")
