"""The authenticated admission channel between Spark's source runner and the driver.

Spark runs a Python streaming reader's ``initialOffset``/``latestOffset``/
``partitions``/``commit`` in a separate Python process that the driver JVM
spawns.  The admission controller, though, is a live object in the driver or
notebook process, where widgets can change it.  This module connects the two:
:class:`ChannelServer` runs in the driver process on ``127.0.0.1`` and answers
requests from :class:`ChannelClient`, which the reader opens lazily in the runner
process.  Connections are authenticated with a random key (HMAC challenge of
:mod:`multiprocessing.connection`) that is passed as a file path, never as a
literal option, so it does not appear in query plans or logs.

The same channel takes live reconfigurations from another process (``lmstream-kit reconfigure``),
with the same key.  This module does not import pyspark; the engine's data source uses the client.
"""

from __future__ import annotations

import os
import secrets
import socket
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection, Listener, answer_challenge, deliver_challenge
from pathlib import Path
from typing import Optional, Protocol

from ..exceptions import ChannelError

#: request kinds understood by the server
INITIAL, LATEST, PLANNED, COMMIT, PING = "initial", "latest", "planned", "commit", "ping"
#: a live reconfiguration requested by another process (``lmstream-kit reconfigure``)
RECONFIGURE = "reconfigure"


class ChannelHandler(Protocol):
    """What the server delegates to (LiveStream implements it)."""

    def on_initial(self) -> int: ...

    def on_latest(self, start: Optional[int]) -> int: ...

    def on_planned(self, start: int, end: int, split: bool = True) -> Optional[int]: ...

    def on_commit(self, end: int) -> None: ...

    def on_reconfigure(self, op: str, value) -> dict: ...


@dataclass
class ChannelStats:
    """Counters of the server, for overhead reports."""

    requests: int = 0
    latest_calls: int = 0
    handler_s: float = 0.0  # time spent inside the handler (the decision)


#: seconds a peer has to complete the key's challenge before the other side drops it
HANDSHAKE_TIMEOUT_S = 5.0


def write_key_file(path: Path) -> bytes:
    """Create a fresh random authkey in ``path`` readable by the owner only.

    The file is made anew every time (an older one is removed first, whatever its mode, and the
    new one is created exclusively with mode 0600), so a key file left readable by others, or a
    link planted in its place, never holds the key.
    """
    key = secrets.token_bytes(32)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "wb") as fh:
        os.fchmod(fh.fileno(), 0o600)  # whatever the umask did
        fh.write(key)
    return key


def _shut(conn: Connection) -> None:
    """Wake whatever blocks on ``conn`` (a recv of a handshake): shut its socket down, both ways."""
    try:
        s = socket.socket(fileno=os.dup(conn.fileno()))
    except (OSError, ValueError):  # closed already
        return
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        s.close()


def _handshake(conn: Connection, steps, timeout_s: float) -> Optional[str]:
    """Run the key's challenge ``steps`` on ``conn`` within ``timeout_s``: None when done, else why not.

    A peer that connects and says nothing, or answers half a challenge, would otherwise hold the
    other side's recv forever: a timer shuts the socket down when the time is up.
    """
    expired = threading.Event()

    def expire() -> None:
        expired.set()
        _shut(conn)

    timer = threading.Timer(timeout_s, expire)
    timer.daemon = True
    timer.start()
    try:
        for step in steps:
            step()
        return None
    except Exception as exc:  # wrong key, the peer went away, or the timer shut it down
        if expired.is_set():
            return f"no answer to the key's challenge within {timeout_s:g} s"
        return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    finally:
        timer.cancel()


class ChannelServer:
    """Serve admission requests from Spark's reader process on 127.0.0.1.

    Parameters
    ----------
    handler : ChannelHandler
        Receives the decoded requests; its answers go back to the reader.
    key_file : path
        Where the random authkey is written (mode 0600).
    handshake_timeout_s : float
        Seconds a new connection has to answer the key's challenge; a silent or slow peer is
        dropped after them.  Each connection is authenticated in a thread of its own, so however
        many connect and say nothing, the reader's connection and the next keyed client are
        served.
    """

    def __init__(self, handler: ChannelHandler, *, key_file: Path,
                 handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S) -> None:
        self.handler = handler
        self.handshake_timeout_s = float(handshake_timeout_s)
        self.key_file = Path(key_file)
        self._key = write_key_file(self.key_file)
        # a backlog for bursts of connections: with Listener's default of 1 a flood makes every new peer,
        # keyed or not, wait for SYN retries of a second and more
        self._listener = Listener(("127.0.0.1", 0), authkey=self._key, backlog=128)
        self.address = self._listener.address
        self.stats = ChannelStats()
        self._closed = threading.Event()
        self._conns: set[Connection] = set()  # open connections, for close(); each leaves when it ends
        self._lock = threading.Lock()
        self._accept_thread = threading.Thread(
            target=self._accept_loop, name="lmstream-channel-accept", daemon=True
        )
        self._accept_thread.start()

    @property
    def port(self) -> int:
        return int(self.address[1])

    def _accept_loop(self) -> None:
        # the socket is accepted here and authenticated in the connection's own thread: a peer that
        # connects and then says nothing (a reader process left over from a stopped query, say)
        # holds only its own thread, never the acceptance of the next connection
        raw = self._listener._listener  # Listener.accept() would run the handshake in this thread
        while not self._closed.is_set():
            try:
                conn = raw.accept()
            except Exception:  # closed listener, reset: keep serving or exit
                if self._closed.is_set():
                    return
                continue
            with self._lock:
                self._conns.add(conn)
            threading.Thread(
                target=self._serve, args=(conn,), name="lmstream-channel-conn", daemon=True
            ).start()

    def _serve(self, conn: Connection) -> None:
        try:
            # the key's challenge, both ways, as Listener.accept() does, within the handshake timeout
            if _handshake(conn, (lambda: deliver_challenge(conn, self._key),
                                 lambda: answer_challenge(conn, self._key)), self.handshake_timeout_s) is not None:
                return  # wrong key, silent, or gone: dropped
            while not self._closed.is_set():
                try:
                    request = conn.recv()
                except (EOFError, OSError):
                    return
                try:
                    reply = ("ok", self._dispatch(request))
                except Exception as exc:  # report to the reader instead of hanging it
                    reply = ("error", f"{type(exc).__name__}: {exc}")
                try:
                    conn.send(reply)
                except (OSError, ValueError):
                    return
        finally:
            with self._lock:
                self._conns.discard(conn)
            try:
                conn.close()
            except OSError:  # already closed by close() on shutdown
                pass

    @property
    def connections(self) -> int:
        """Connections open now (authenticated or still in their handshake)."""
        with self._lock:
            return len(self._conns)

    def _dispatch(self, request: tuple):
        kind = request[0]
        self.stats.requests += 1
        t0 = time.perf_counter()
        try:
            if kind == LATEST:
                self.stats.latest_calls += 1
                return self.handler.on_latest(request[1])
            if kind == PLANNED:
                # a 4th item: whether the reader splits the batch into partitions (the reply's count)
                return self.handler.on_planned(int(request[1]), int(request[2]), *[bool(x) for x in request[3:4]])
            if kind == COMMIT:
                return self.handler.on_commit(int(request[1]))
            if kind == INITIAL:
                return self.handler.on_initial()
            if kind == PING:
                return "pong"
            if kind == RECONFIGURE:
                return self.handler.on_reconfigure(str(request[1]), request[2] if len(request) > 2 else None)
            raise ValueError(f"unknown channel request {kind!r}")
        finally:
            self.stats.handler_s += time.perf_counter() - t0

    def close(self) -> None:
        """Stop accepting, close every connection, remove the key file."""
        if self._closed.is_set():
            return
        self._closed.set()
        try:
            # closing a listening socket does not wake a blocked accept() on Linux:
            # connect once so that accept() returns and the loop sees _closed
            socket.create_connection(self.address, timeout=1.0).close()
        except OSError:
            pass
        try:
            self._listener.close()
        except OSError:
            pass
        self._accept_thread.join(timeout=2.0)
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            _shut(conn)  # wakes its thread's recv; the thread closes it
        try:
            self.key_file.unlink()
        except OSError:
            pass


class ChannelClient:
    """The reader-side end: one persistent connection, opened on first use.

    A new connection per call costs ~44 ms, a round trip on a persistent one
    ~0.2 ms, so the connection is kept for the life of the reader.
    """

    def __init__(self, host: str, port: int, key_file: str, *, timeout_s: float = 30.0,
                 handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S) -> None:
        self.host, self.port, self.key_file = host, int(port), key_file
        self.timeout_s = timeout_s
        self.handshake_timeout_s = float(handshake_timeout_s)
        self._conn: Optional[Connection] = None

    def _connect(self) -> Connection:
        try:
            key = Path(self.key_file).read_bytes()
        except OSError as exc:
            raise ChannelError(
                f"cannot read the admission channel key {self.key_file}: {exc.strerror}"
            ) from None
        try:  # connect within the handshake timeout too (Client() would wait as long as the OS does)
            with socket.create_connection((self.host, self.port), timeout=self.handshake_timeout_s) as s:
                s.settimeout(None)
                conn = Connection(s.detach())
        except OSError as exc:
            raise ChannelError(
                f"cannot reach the admission channel at {self.host}:{self.port}: {exc}"
            ) from None
        why = _handshake(conn, (lambda: answer_challenge(conn, key), lambda: deliver_challenge(conn, key)),
                         self.handshake_timeout_s)
        if why is not None:
            conn.close()
            raise ChannelError(f"cannot reach the admission channel at {self.host}:{self.port}: {why}")
        return conn

    def call(self, *request):
        if self._conn is None:
            self._conn = self._connect()
        try:
            self._conn.send(request)
            if not self._conn.poll(self.timeout_s):
                raise ChannelError(
                    f"admission channel at {self.host}:{self.port} did not answer "
                    f"{request[0]!r} within {self.timeout_s:g} s"
                )
            status, value = self._conn.recv()
        except (EOFError, OSError) as exc:
            self.close()
            raise ChannelError(
                f"admission channel at {self.host}:{self.port} closed: {exc or 'EOF'}"
            ) from None
        if status != "ok":
            raise ChannelError(f"admission channel refused {request[0]!r}: {value}")
        return value

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except OSError:
                pass
            self._conn = None

