"""PySpark's source-runner process does not print its own shutdown traceback (BrokenPipe at stop)."""

from __future__ import annotations

import subprocess
import sys

import pytest

PRELUDE = """
import sys, types
from lmstream_kit.engine import source
runner = types.SimpleNamespace(__spec__=types.SimpleNamespace(name=source.RUNNER_MODULE))
"""


def run(body: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", PRELUDE + body], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("error", ["BrokenPipeError(32, 'Broken pipe')", "EOFError()", "ConnectionResetError()"])
def test_the_runners_socket_errors_at_shutdown_are_silent(error):
    proc = run(f"assert source.quiet_runner_shutdown(runner)\nraise {error}\n")
    assert proc.returncode == 1
    assert proc.stderr == ""


def test_other_errors_in_the_runner_still_print_their_traceback():
    proc = run("assert source.quiet_runner_shutdown(runner)\nraise ValueError('real problem')\n")
    assert proc.returncode == 1
    assert "Traceback" in proc.stderr and "ValueError: real problem" in proc.stderr


def test_only_the_runner_process_is_touched_and_only_once():
    proc = run(
        "assert not source.quiet_runner_shutdown()\n"  # this process is not the runner
        "assert source.quiet_runner_shutdown(runner)\n"
        "assert not source.quiet_runner_shutdown(runner)\n"
        "raise BrokenPipeError(32, 'Broken pipe')\n"
    )
    assert proc.returncode == 1 and proc.stderr == "", proc.stderr
    plain = run("raise BrokenPipeError(32, 'Broken pipe')\n")
    assert "Traceback" in plain.stderr  # without the hook Python prints it
