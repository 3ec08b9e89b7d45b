"""Stop signals without Spark: SIGTERM/SIGHUP as KeyboardInterrupt, held stops, shielded children."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from lmstream_kit.signals import StopSignal, deferred_stop, shielded_children, stop_signals

CHILD = "import signal; print(int(signal.getsignal(signal.SIGTERM)), int(signal.getsignal(signal.SIGHUP)))"


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_stop_signal_is_a_keyboard_interrupt_naming_itself(sig, code):
    with stop_signals():
        with pytest.raises(KeyboardInterrupt) as info:
            os.kill(os.getpid(), sig)
    assert isinstance(info.value, StopSignal) and info.value.exit_code == code
    assert info.value.name == signal.Signals(sig).name


def test_the_handlers_before_come_back_after_the_block():
    before = signal.getsignal(signal.SIGTERM)
    with stop_signals():
        assert signal.getsignal(signal.SIGTERM) is not before
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_held_stop_is_raised_when_the_block_ends_and_said_once():
    said, ran = [], []
    with stop_signals():
        with pytest.raises(StopSignal) as info:
            with deferred_stop(said.append):
                os.kill(os.getpid(), signal.SIGHUP)
                os.kill(os.getpid(), signal.SIGTERM)
                ran.append("the rest of the block")
    assert ran == ["the rest of the block"] and said == ["SIGHUP"] and info.value.name == "SIGHUP"


def test_a_held_ctrl_c_is_a_plain_keyboard_interrupt():
    with pytest.raises(KeyboardInterrupt) as info:
        with deferred_stop():
            os.kill(os.getpid(), signal.SIGINT)
    assert not isinstance(info.value, StopSignal)


def test_nothing_held_raises_nothing():
    with deferred_stop():
        pass


def test_children_started_in_the_shield_ignore_stop_signals_and_this_process_does_not():
    with stop_signals():
        with shielded_children():
            shielded = subprocess.run([sys.executable, "-c", CHILD], preexec_fn=lambda: None,
                                      capture_output=True, text=True, check=True).stdout.split()
            with pytest.raises(StopSignal):
                os.kill(os.getpid(), signal.SIGTERM)
        plain = subprocess.run([sys.executable, "-c", CHILD], preexec_fn=lambda: None,
                               capture_output=True, text=True, check=True).stdout.split()
    ignored, default = str(int(signal.SIG_IGN)), str(int(signal.SIG_DFL))
    assert shielded == [ignored, ignored] and plain == [default, default]
