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


class _Service:
    """What `cluster` and `kafka` serve: start, stop, and (the broker) whether it still runs."""

    def __init__(self, fail_start=None, runs_for=None):
        self.fail_start, self.runs_for = fail_start, runs_for
        self.calls = []

    def start(self):
        self.calls.append("start")
        if self.fail_start is not None:
            raise self.fail_start

    def stop(self):
        self.calls.append("stop")

    def running(self):
        self.calls.append("check")
        if isinstance(self.runs_for, BaseException):
            raise self.runs_for
        self.runs_for -= 1
        return self.runs_for >= 0


def test_a_served_process_is_stopped_however_serving_ends(monkeypatch, capsys):
    from lmstream_kit import cli
    from lmstream_kit.exceptions import KitError

    monkeypatch.setattr(cli.time, "sleep", lambda s: None)
    # it exits by itself: one line naming why, stopped once
    s = _Service(runs_for=2)
    with pytest.raises(KitError, match="^the thing exited; see its log$"):
        cli._serve_until_stopped(s, "thing", lambda: "ready", running=s.running,
                                 exited=lambda: "the thing exited; see its log")
    assert s.calls == ["start", "check", "check", "check", "stop"]
    assert capsys.readouterr().out == "ready\n"
    # a stop signal while it serves: "stopping ...", stopped once, no error
    s = _Service(runs_for=StopSignal(signal.SIGTERM))
    cli._serve_until_stopped(s, "thing", lambda: "ready", running=s.running)
    assert s.calls == ["start", "check", "stop"] and capsys.readouterr().out == "ready\nstopping ...\n"
    # Ctrl-C during its start: stopped, and the interrupt goes on up
    s = _Service(fail_start=KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        cli._serve_until_stopped(s, "thing", lambda: "ready")
    assert s.calls == ["start", "stop"] and capsys.readouterr().out == ""


def test_a_stop_is_remembered_for_the_error_a_call_into_the_jvm_turns_it_into():
    import time

    from lmstream_kit.signals import stop_received

    with stop_signals():
        assert stop_received() is None
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        assert stop_received() == "SIGINT"
    with stop_signals():
        assert stop_received() is None  # the next command starts without one


@pytest.mark.parametrize("signum, said, code", [(signal.SIGINT, "aborted", 130), (signal.SIGTERM, "stopped (SIGTERM)", 143)])
def test_the_cli_reports_a_stop_that_surfaced_as_a_py4j_error_in_one_line(monkeypatch, capsys, signum, said, code):
    import time

    from lmstream_kit import cli

    def interrupted_call(**kwargs):  # py4j answers a call cut by the interrupt with its own error
        try:
            os.kill(os.getpid(), signum)
            time.sleep(5)
        except KeyboardInterrupt:
            raise RuntimeError("An error occurred while calling o19844.isActive") from None

    monkeypatch.setattr(cli.cli, "main", interrupted_call)
    assert cli.main([]) == code
    err = capsys.readouterr().err
    assert err.strip() == said and "Traceback" not in err


def test_the_cli_still_raises_an_error_no_stop_caused(monkeypatch):
    from lmstream_kit import cli

    def failing(**kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(cli.cli, "main", failing)
    with pytest.raises(RuntimeError, match="a bug"):
        cli.main([])
