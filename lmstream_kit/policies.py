"""Admission policies compared on the same pipeline (pure Python).

``lmstream``
    the :class:`~lmstream_kit.controller.AdmissionController` decides at every
    poll (Spark trigger 0, polling every ~10 ms);
``fixed``
    the paper's baseline: a static processing-time trigger (10 s by default)
    that admits everything pending at each tick;
``asap``
    trigger 0, admitting everything pending as soon as Spark asks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from .controller import AdmissionController, Decision
from .exceptions import ConfigError
from .protocol import BatchController
from .registry import Registry


class AdmitAll(BatchController):
    """Gate of the baseline policies: admit whatever is pending (nothing to tune or learn)."""

    prefix = "gate"

    def __init__(self, reason: str = "trigger") -> None:
        super().__init__()
        self.reason = reason

    def decide(self, now: float, pending: Sequence) -> Decision:
        if not pending:
            return Decision(
                admit=False, reason="empty", n_datasets=0, rows=0, nbytes=0, age_s=0.0,
                predicted_s=0.0, margin_s=0.0, estimate_s=0.0, target_s=math.nan,
            )
        oldest = min(float(d.arrival) for d in pending)
        return Decision(
            admit=True,
            reason=self.reason,
            n_datasets=len(pending),
            rows=sum(int(d.rows) for d in pending),
            nbytes=sum(int(d.nbytes) for d in pending),
            age_s=now - oldest,
            predicted_s=math.nan,
            margin_s=math.nan,
            estimate_s=math.nan,
            target_s=math.nan,
        )


#: How often a stream's Spark asks the admission controller while it holds data back (wall s; Spark's
#: polling delay, :func:`~lmstream_kit.engine.stream.polling_confs`).  At Spark's 10 ms the asks
#: (JVM, source runner, decision) cost more than the batches on small loads: 1,000 rows/s, speedup
#: 2, 2-core VM, lmstream, constant traffic, two runs each in the order 10, 50, 50, 10 ms
#: (``benchmarks/results/poll-interval-*``; ``poll_interval_s`` 0.02 and 0.1 there, whose Spark
#: polling was 10 and 50 ms), polling every 50 ms cut the asks 4x and the CPU per million rows from
#: 191-243 to 135-168 s on LR2S, 117-149 to 73-78 s on CM1T and 495-613 to 482-523 s on LR1S (its
#: batches, not its waits, cost most), with the same latencies and every batch within the bound.
#: (The bare controller keeps 0.01 s, Spark's default, for the simulator and the seeded decisions.)
STREAM_POLL_INTERVAL_S = 0.05


@dataclass(frozen=True)
class Policy:
    """How micro-batches are triggered and admitted.

    ``trigger_s`` is Spark's processing-time trigger interval (0 = start the next
    batch as soon as the previous one ends, polling the source every ~10 ms).
    """

    name: str
    description: str
    trigger_s: float
    uses_controller: bool

    def make_gate(self, *, slide_s: float, controller_params: dict | None = None):
        """A fresh gate for one stream: the controller (polling every :data:`STREAM_POLL_INTERVAL_S`
        unless ``controller_params`` say otherwise), or :class:`AdmitAll`."""
        if self.uses_controller:
            return AdmissionController(slide_s=slide_s, **{"poll_interval_s": STREAM_POLL_INTERVAL_S,
                                                           **(controller_params or {})})
        return AdmitAll(reason=self.name)


POLICIES: Registry[Policy] = Registry("policy")
POLICIES.register(
    "lmstream",
    Policy("lmstream", "LMStream dynamic batching: admit when the latency bound is reached", 0.0, True),
)
POLICIES.register(
    "asap", Policy("asap", "trigger 0: admit everything pending at once", 0.0, False)
)
DEFAULT_FIXED_TRIGGER_S = 10.0
POLICIES.register(
    "fixed",
    Policy("fixed", "static trigger interval (the paper's baseline)", DEFAULT_FIXED_TRIGGER_S, False),
)


def get_policy(name: str, *, trigger_s: float | None = None) -> Policy:
    """Look up a policy by name; ``trigger_s`` sets the ``fixed`` interval (default 10 s)."""
    policy = POLICIES.get(name)
    if policy.name == "fixed" and trigger_s is not None:
        if not (isinstance(trigger_s, (int, float)) and math.isfinite(trigger_s) and trigger_s > 0):
            raise ConfigError(f"fixed trigger interval must be a finite number > 0 of seconds, got {trigger_s}")
        policy = replace(policy, trigger_s=float(trigger_s))
    return policy
