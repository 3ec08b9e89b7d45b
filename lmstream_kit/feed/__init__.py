"""Feeds: where the rows come from (generator, directory ingest) and the spool they go to."""

from .ingest import DirectoryIngest, IngestReport
from .spool import DatasetInfo, Spool, read_dataset_files
from .traffic import (
    TRAFFIC_PATTERNS,
    ConstantTraffic,
    FeedGenerator,
    RandomTraffic,
    TraceTraffic,
    Traffic,
    traffic_from_spec,
)

__all__ = [
    "ConstantTraffic",
    "DatasetInfo",
    "DirectoryIngest",
    "FeedGenerator",
    "IngestReport",
    "RandomTraffic",
    "Spool",
    "TRAFFIC_PATTERNS",
    "TraceTraffic",
    "Traffic",
    "read_dataset_files",
    "traffic_from_spec",
]
