"""A fake live stream for the dashboard and panel tests: what they read of a LiveView, and ``emit``."""

from __future__ import annotations

from pathlib import Path

from lmstream_kit.protocol import StreamInfo


class FakeStream:
    """What the dashboard and the panels read of a live stream (a LiveView); ``emit`` is Spark's thread."""

    def __init__(self, run_dir, records=(), *, workload: str = "lr2s"):
        self.run_dir = Path(run_dir)
        self._records = [dict(r) for r in records]
        self.callbacks = []
        self.workload = workload

    @property
    def records(self):
        return [dict(r) for r in self._records]

    def on_batch(self, callback):
        self.callbacks.append(callback)

    def remove_on_batch(self, callback):
        if callback in self.callbacks:
            self.callbacks.remove(callback)

    def controls(self):
        return []

    def info(self):
        return StreamInfo(self.workload, "lmstream")

    def emit(self, record):
        self._records.append(dict(record))
        for callback in list(self.callbacks):
            callback(dict(record))
