"""A workload with no traffic generator: it runs on files only (used by tests/test_own_query.py)."""

from lmstream_kit import define_workload


@define_workload(schema="plate STRING, ts TIMESTAMP", bound="10 seconds", event_time="ts")
def PLATES(stream):
    """Every licence-plate read, unchanged."""
    return stream
