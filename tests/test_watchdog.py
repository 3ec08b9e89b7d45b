"""The bench's watchdog: it fires once, for the phase armed last, and never after a disarm or a close."""

from __future__ import annotations

import threading
import time

import pytest

from lmstream_kit.bench.watchdog import Watchdog


def test_it_fires_once_for_the_phase_armed_last():
    calls, fired = [], threading.Event()
    with Watchdog(lambda what: (calls.append(what), fired.set())) as dog:
        dog.arm(30.0, "start and feed")
        dog.arm(0.02, "catch-up and stop")  # a new phase moves the deadline
        assert fired.wait(5.0)
        dog.arm(0.01, "again")  # after it fired it does nothing more
        time.sleep(0.1)
    assert calls == ["catch-up and stop"] and dog.fired == "catch-up and stop"


def test_a_deadline_moved_later_is_not_kept_to_the_first():
    calls = []
    with Watchdog(calls.append) as dog:
        dog.arm(0.05, "first")
        dog.arm(30.0, "later")
        time.sleep(0.2)
    assert calls == [] and dog.fired is None


def test_disarmed_or_closed_it_does_not_fire():
    calls = []
    dog = Watchdog(calls.append)
    dog.arm(0.05, "the stop")
    dog.close()  # the run ended first
    time.sleep(0.15)
    assert calls == [] and dog.fired is None and not dog._thread.is_alive()


@pytest.mark.parametrize("seconds", [0, -1.0, float("nan")])
def test_a_deadline_that_is_not_positive_is_refused_by_name(seconds):
    with Watchdog(lambda what: None) as dog, pytest.raises(ValueError, match="positive number of seconds, got"):
        dog.arm(seconds, "the stop")
