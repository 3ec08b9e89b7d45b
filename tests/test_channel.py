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
