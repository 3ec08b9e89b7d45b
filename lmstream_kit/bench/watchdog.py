"""A wall-clock limit on a bench run: where a phase of the run outlives its deadline, the watchdog
calls its ``on_fire`` once, from its own thread (the bench's: kill Spark's driver JVM).

Why the bench needs one, measured on the 2-core VM (lr1t-capacity-2026-12-05): an LR1T capacity
probe at 38,055 rows/s filled its 4 GiB driver heap and the JVM spent its time collecting, over and
over, without running out of heap (no exit) and without answering py4j.  Every timeout of the run
is a wait of the kit's own, but a py4j call into such a JVM returns only when the JVM answers: the
probe's stop waited on ``query.stop()`` for over 10 minutes and the search with it.  Killing the
JVM makes that call fail at once; the bench then runs the next probe on a new session.

Plain Python, no Spark: the deadlines and what to do are the caller's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class Watchdog:
    """Calls ``on_fire(what)`` once where the armed deadline passes before :meth:`disarm`.

    :meth:`arm` sets (or moves) the deadline to ``seconds`` from now and names the phase it
    guards; :meth:`disarm` lifts it.  After it fired, :attr:`fired` is the phase's name and the
    watchdog does nothing more.  :meth:`close` ends its thread (a fire under way ends first).

    >>> import time
    >>> calls = []
    >>> with Watchdog(calls.append) as dog:
    ...     dog.arm(0.02, "the stop")
    ...     time.sleep(0.2)
    >>> calls, dog.fired
    (['the stop'], 'the stop')
    >>> with Watchdog(calls.append) as dog:
    ...     dog.arm(0.05, "the feed")
    ...     dog.disarm()
    ...     time.sleep(0.1)
    >>> calls, dog.fired
    (['the stop'], None)
    """

    def __init__(self, on_fire: Callable[[str], None], *, clock: Callable[[], float] = time.monotonic) -> None:
        self._on_fire = on_fire
        self._clock = clock
        self._cond = threading.Condition()
        self._deadline: float | None = None
        self._what: str | None = None
        self._closed = False
        self.fired: str | None = None
        self._thread = threading.Thread(target=self._watch, name="lmstream-bench-watchdog", daemon=True)
        self._thread.start()

    def arm(self, seconds: float, what: str) -> None:
        """Fire where :meth:`disarm` or another :meth:`arm` does not come within ``seconds``."""
        seconds = float(seconds)
        if not seconds > 0:
            raise ValueError(f"a watchdog's deadline must be a positive number of seconds, got {seconds!r}")
        with self._cond:
            self._deadline, self._what = self._clock() + seconds, what
            self._cond.notify()

    def disarm(self) -> None:
        with self._cond:
            self._deadline = None
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        if self._thread is not threading.current_thread():
            self._thread.join()

    def __enter__(self) -> Watchdog:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _watch(self) -> None:
        with self._cond:
            while True:
                if self._closed:
                    return
                if self._deadline is None:
                    self._cond.wait()
                    continue
                left = self._deadline - self._clock()
                if left > 0:
                    self._cond.wait(min(left, 1.0))  # 1 s at most: a clock that is not the condition's own
                    continue
                self.fired = self._what
                break
        self._on_fire(self.fired)
