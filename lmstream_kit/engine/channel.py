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
from multiprocessing.connection import Client, Connection, Listener, answer_challenge, deliver_challenge
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


def write_key_file(path: Path) -> bytes:
    """Create a fresh random authkey in ``path`` readable by the owner only."""
    key = secrets.token_bytes(32)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(key)
    return key


class ChannelServer:
    """Serve admission requests from Spark's reader process on 127.0.0.1.

    Parameters
    ----------
    handler : ChannelHandler
        Receives the decoded requests; its answers go back to the reader.
    key_file : path
        Where the random authkey is written (mode 0600).
    """

    def __init__(self, handler: ChannelHandler, *, key_file: Path) -> None:
        self.handler = handler
        self.key_file = Path(key_file)
        self._key = write_key_file(self.key_file)
        self._listener = Listener(("127.0.0.1", 0), authkey=self._key)
        self.address = self._listener.address
        self.stats = ChannelStats()
        self._closed = threading.Event()
        self._conns: list[Connection] = []
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
                self._conns.append(conn)
            threading.Thread(
                target=self._serve, args=(conn,), name="lmstream-channel-conn", daemon=True
            ).start()

    def _serve(self, conn: Connection) -> None:
        try:
            try:  # the key's challenge, both ways, as Listener.accept() does
                deliver_challenge(conn, self._key)
                answer_challenge(conn, self._key)
            except Exception:  # wrong key, or the peer went away: drop it
                return
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
            try:
                conn.close()
            except OSError:  # already closed by close() on shutdown
                pass

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
            for conn in self._conns:
                try:
                    conn.close()
                except OSError:
                    pass
        try:
            self.key_file.unlink()
        except OSError:
            pass


class ChannelClient:
    """The reader-side end: one persistent connection, opened on first use.

    A new connection per call costs ~44 ms, a round trip on a persistent one
    ~0.2 ms, so the connection is kept for the life of the reader.
    """

    def __init__(self, host: str, port: int, key_file: str, *, timeout_s: float = 30.0) -> None:
        self.host, self.port, self.key_file = host, int(port), key_file
        self.timeout_s = timeout_s
        self._conn: Optional[Connection] = None

    def _connect(self) -> Connection:
        try:
            key = Path(self.key_file).read_bytes()
        except OSError as exc:
            raise ChannelError(
                f"cannot read the admission channel key {self.key_file}: {exc.strerror}"
            ) from None
        try:
            return Client((self.host, self.port), authkey=key)
        except Exception as exc:
            raise ChannelError(
                f"cannot reach the admission channel at {self.host}:{self.port}: {exc}"
            ) from None

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

