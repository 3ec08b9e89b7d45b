"""Stop signals: SIGTERM and SIGHUP stop a command as cleanly as Ctrl-C, and no child outlives it.

systemd, ``timeout``, container runtimes and Jupyter's kernel shutdown send SIGTERM; a closed
terminal sends SIGHUP.  Python's default for both is to die on the spot, which leaves the
stream's JVM printing stack traces and a cluster's JVMs orphaned.  :func:`stop_signals` turns
them into :class:`StopSignal`, a KeyboardInterrupt, so every command's Ctrl-C path runs.

:func:`deferred_stop` holds a stop back while something must not be cut in half (Spark's JVM
starting: cut, it is left running with nobody to stop it); the stop is raised when the block ends.
:func:`shielded_children` starts child processes (Spark's JVM) with SIGTERM and SIGHUP ignored,
so that a signal sent to the whole process group stops the kit, and the kit stops its JVM, in
order: the JVM exits on its own when the driver's Python is gone (PySpark's gateway watches its
standard input).

>>> import os, signal
>>> with stop_signals():
...     try:
...         os.kill(os.getpid(), signal.SIGTERM)
...     except StopSignal as stop:
...         print(stop.name, stop.exit_code)
SIGTERM 143
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator

__all__ = ["STOP_SIGNALS", "StopSignal", "deferred_stop", "shielded_children", "stop_received", "stop_signals"]

#: the signals that stop a command like Ctrl-C (SIGINT keeps Python's own KeyboardInterrupt)
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


class StopSignal(KeyboardInterrupt):
    """Raised in the main thread when a stop signal (SIGTERM, SIGHUP) arrives."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        """The shell's code for a process the signal ended: 128 + its number."""
        return 128 + self.signum


#: the first stop (Ctrl-C, SIGTERM, SIGHUP) that reached :func:`stop_signals`' block, by name
_received: list[str] = []


def _raise(signum, _frame) -> None:
    _received.append(signal.Signals(signum).name)
    raise StopSignal(signum)


def _interrupt(signum, frame) -> None:
    _received.append(signal.Signals(signum).name)
    signal.default_int_handler(signum, frame)


def stop_received() -> str | None:
    """The name of the first stop signal :func:`stop_signals` saw (None: none yet).

    A Ctrl-C that lands inside a call to Spark's JVM reaches the caller as py4j's error of that
    call ("An error occurred while calling o19844.isActive"), not as KeyboardInterrupt: a command
    asks this to tell an interrupted run from a failed one.
    """
    return _received[0] if _received else None


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def _handled(signums, handler) -> Iterator[None]:
    """``handler`` for ``signums`` within the block (main thread only: elsewhere nothing changes)."""
    if not _in_main_thread():
        yield
        return
    old = {s: signal.signal(s, handler) for s in signums}
    try:
        yield
    finally:
        for s, before in old.items():
            signal.signal(s, before)


@contextlib.contextmanager
def stop_signals() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise :class:`StopSignal` in the main thread, Ctrl-C
    its KeyboardInterrupt, and :func:`stop_received` names the first that came.

    Outside the main thread (where Python cannot set handlers) it does nothing.
    """
    _received.clear()  # a new command: no stop yet
    with _handled((signal.SIGINT,), _interrupt), _handled(STOP_SIGNALS, _raise):
        yield


@contextlib.contextmanager
def deferred_stop(said: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hold Ctrl-C, SIGTERM and SIGHUP back until the block ends, then raise the first one.

    ``said(name)`` is called once when the first arrives, so the person who pressed Ctrl-C sees
    that it was heard.  A stop is raised as KeyboardInterrupt (Ctrl-C) or :class:`StopSignal`.
    """
    got: list[int] = []

    def hold(signum, _frame) -> None:
        if not got and said is not None:
            said(signal.Signals(signum).name)
        got.append(signum)

    with _handled((signal.SIGINT, *STOP_SIGNALS), hold):
        yield
    if got:
        if got[0] == signal.SIGINT:
            raise KeyboardInterrupt
        raise StopSignal(got[0])


_shield = threading.local()
_hook_lock = threading.Lock()
_hooked = False


def _ignore_stop_signals_in_child() -> None:
    if getattr(_shield, "on", False):
        for s in STOP_SIGNALS:
            signal.signal(s, signal.SIG_IGN)


@contextlib.contextmanager
def shielded_children() -> Iterator[None]:
    """Child processes this thread starts within the block ignore SIGTERM and SIGHUP.

    It works where a child is forked by Python code (``os.fork``, or ``subprocess`` with a
    ``preexec_fn``, as PySpark starts its JVM): an at-fork hook sets the child's dispositions,
    this process keeps its own.  An ignored disposition survives ``exec``, and a JVM started
    with a signal ignored keeps ignoring it.
    """
    global _hooked
    with _hook_lock:
        if not _hooked and hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_ignore_stop_signals_in_child)
            _hooked = True
    before = getattr(_shield, "on", False)
    _shield.on = True
    try:
        yield
    finally:
        _shield.on = before
