"""The driver <-> source-runner admission channel (no Spark)."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path

import pytest

from lmstream_kit.engine.channel import COMMIT, INITIAL, LATEST, PLANNED, ChannelClient, ChannelServer
from lmstream_kit.exceptions import ChannelError


class Recorder:
    def __init__(self):
        self.calls = []

    def on_initial(self):
        self.calls.append(("initial",))
        return 7

    def on_latest(self, start):
        self.calls.append(("latest", start))
        return (start or 0) + 3

    def on_planned(self, start, end, split=True):
        self.calls.append(("planned", start, end))

    def on_commit(self, end):
        self.calls.append(("commit", end))


def _remote_latest(port, key_file, q):
    client = ChannelClient("127.0.0.1", port, key_file)
    q.put([client.call(LATEST, 10), client.call(LATEST, None)])
    client.close()


def test_round_trip_dispatches_every_request_kind(tmp_path: Path):
    rec = Recorder()
    server = ChannelServer(rec, key_file=tmp_path / "k")
    try:
        client = ChannelClient("127.0.0.1", server.port, str(server.key_file))
        assert client.call(INITIAL) == 7
        assert client.call(LATEST, 5) == 8
        assert client.call(PLANNED, 5, 8) is None
        assert client.call(COMMIT, 8) is None
        client.close()
    finally:
        server.close()
    assert rec.calls == [("initial",), ("latest", 5), ("planned", 5, 8), ("commit", 8)]
    assert server.stats.latest_calls == 1
    assert not (tmp_path / "k").exists(), "the key file is removed on close"


def test_another_process_reaches_the_server(tmp_path: Path):
    server = ChannelServer(Recorder(), key_file=tmp_path / "k")
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_remote_latest, args=(server.port, str(server.key_file), q))
    p.start()
    try:
        assert q.get(timeout=60) == [13, 3]
    finally:
        p.join(30)
        server.close()


def test_wrong_key_is_refused(tmp_path: Path):
    server = ChannelServer(Recorder(), key_file=tmp_path / "k")
    bad = tmp_path / "bad"
    bad.write_bytes(b"x" * 32)
    try:
        with pytest.raises(ChannelError, match=f"127.0.0.1:{server.port}"):
            ChannelClient("127.0.0.1", server.port, str(bad)).call(LATEST, 0)
    finally:
        server.close()


def test_handler_errors_reach_the_client_as_one_line(tmp_path: Path):
    class Broken(Recorder):
        def on_latest(self, start):
            raise RuntimeError("spool vanished")

    server = ChannelServer(Broken(), key_file=tmp_path / "k")
    try:
        client = ChannelClient("127.0.0.1", server.port, str(server.key_file))
        with pytest.raises(ChannelError, match="RuntimeError: spool vanished"):
            client.call(LATEST, 0)
        assert client.call(INITIAL) == 7, "the connection survives a handler error"
    finally:
        server.close()


def test_missing_key_file_names_the_path(tmp_path: Path):
    with pytest.raises(ChannelError, match="nope.key"):
        ChannelClient("127.0.0.1", 1, str(tmp_path / "nope.key")).call(LATEST, 0)


def test_silent_connections_do_not_keep_a_keyed_client_out(tmp_path: Path):
    import socket
    import threading

    server = ChannelServer(Recorder(), key_file=tmp_path / "k")
    silent = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(3)]  # connect, say nothing
    got = []
    try:
        def call():
            client = ChannelClient("127.0.0.1", server.port, str(server.key_file))
            got.append(client.call(INITIAL))
            client.close()

        caller = threading.Thread(target=call, daemon=True)
        caller.start()
        caller.join(30)
        assert got == [7], "a keyed client was kept out by connections that never spoke"
    finally:
        for s in silent:
            s.close()
        server.close()


def test_a_silent_connection_is_dropped_after_the_handshake_timeout_and_a_flood_starves_nobody(tmp_path: Path):
    import socket
    import time

    server = ChannelServer(Recorder(), key_file=tmp_path / "k", handshake_timeout_s=2.0)
    flood = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(200)]  # connect, say nothing
    client = ChannelClient("127.0.0.1", server.port, str(server.key_file))
    try:
        started = time.monotonic()
        assert [client.call(LATEST, n) for n in range(20)] == [n + 3 for n in range(20)]  # served throughout
        assert time.monotonic() - started < 15.0
        # the server sent each silent peer its challenge, then dropped it when its time was up: EOF
        flood[0].settimeout(10.0)
        got = b""
        while chunk := flood[0].recv(4096):
            got += chunk
        assert got.startswith(b"\x00\x00\x00") and time.monotonic() - started < 20.0
        deadline = time.monotonic() + 10.0
        while server.connections > 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.connections == 1  # the keyed client's; the dropped ones left the registry
        assert client.call(INITIAL) == 7
    finally:
        client.close()
        for s in flood:
            s.close()
        server.close()


def test_a_client_gives_up_on_a_peer_that_never_answers_the_challenge(tmp_path: Path):
    import socket
    import time

    key = tmp_path / "k"
    key.write_bytes(b"k" * 32)
    with socket.create_server(("127.0.0.1", 0)) as mute:  # accepts (the OS does) and never says a word
        port = mute.getsockname()[1]
        started = time.monotonic()
        with pytest.raises(ChannelError, match=rf"^cannot reach the admission channel at 127.0.0.1:{port}: no answer "
                                               r"to the key's challenge within 0.5 s$"):
            ChannelClient("127.0.0.1", port, str(key), handshake_timeout_s=0.5).call(LATEST, 0)
        assert time.monotonic() - started < 5.0


def test_the_key_file_is_made_anew_with_mode_0600_whatever_was_there(tmp_path: Path):
    import os
    import stat

    from lmstream_kit.engine.channel import write_key_file

    path = tmp_path / ".channel.key"
    path.write_bytes(b"old key")
    os.chmod(path, 0o644)  # left readable by others, as was seen
    old_umask = os.umask(0)
    try:
        key = write_key_file(path)
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and path.read_bytes() == key and len(key) == 32
    target = tmp_path / "elsewhere"
    target.write_bytes(b"")
    path.unlink()
    path.symlink_to(target)  # a link planted in its place is replaced, not written through
    key = write_key_file(path)
    assert not path.is_symlink() and target.read_bytes() == b"" and path.read_bytes() == key
