"""Watching a directory for files that landed: which have settled, and which were handled already.

:class:`DirectoryWatch` lists the new files of one directory once they have settled;
:class:`Manifest` records every file handled (``ingested.jsonl``), so each is ingested once.

Example
-------
>>> import os, tempfile, time
>>> from pathlib import Path
>>> inbox = Path(tempfile.mkdtemp())
>>> for name in ("a.csv", "b.csv", "notes.txt", ".c.csv"):
...     _ = (inbox / name).write_text("x\\n1\\n")
>>> os.utime(inbox / "a.csv", (time.time() - 10, time.time() - 10))
>>> watch = DirectoryWatch(inbox, DEFAULT_PATTERNS, settle_s=5.0, skip=inbox / "dead_letter.jsonl")
>>> ready, deferred = watch.candidates(time.time(), done={})
>>> [name for _, name, _ in ready], deferred       # b.csv is too recent: not settled yet
(['a.csv'], 1)
"""

from __future__ import annotations

import fnmatch
import json
import os
import time
from collections.abc import Callable, Container, Sequence
from typing import Any
from pathlib import Path

import pyarrow.fs as pafs

from lmstream_kit.exceptions import IngestError

from .spool import Spool
from ..exceptions import one_line as _one_line

__all__ = ["DEFAULT_PATTERNS", "MANIFEST_NAME", "DirectoryWatch", "Manifest"]

MANIFEST_NAME = "ingested.jsonl"
DEFAULT_PATTERNS = ("*.csv", "*.json", "*.jsonl", "*.parquet")


class DirectoryWatch:
    """The files of one directory (top level only) that are new, match ``patterns`` and have settled.

    A file has settled once its size and mtime have not changed for ``settle_s`` seconds.  Empty
    (0-byte) files and names starting with ``.`` or ``_`` (the usual marks of files still being
    copied) are skipped until they change; so is ``skip`` (the dead-letter file, if it lies there).
    """

    def __init__(
        self, directory: str | os.PathLike, patterns: Sequence[str], settle_s: float, *, skip: Path | None
    ) -> None:
        self.directory = Path(directory)
        self.patterns = tuple(patterns)
        self.settle_s = float(settle_s)
        self.skip = skip
        self._seen: dict[str, tuple[tuple[int, int], float]] = {}
        self._reported: dict[str, tuple] = {}  # handled names whose new content was said, and that content
        #: (name, its manifest entry) of handled names whose file changed since: said once each
        self.relanded: list[tuple[str, dict]] = []

    def list_directory(self) -> list[os.DirEntry]:
        """The directory's entries.

        Raises
        ------
        IngestError
            If the directory is missing or unreadable (the message names it).
        """
        try:
            with os.scandir(self.directory) as it:
                return list(it)
        except OSError as exc:
            raise IngestError(f"cannot read ingest directory {self.directory}: {exc.strerror or _one_line(exc)}") from exc

    def candidates(
        self, now: float, done: Container[str]
    ) -> tuple[list[tuple[float, str, os.stat_result]], int]:
        """``((mtime, name, stat) of each settled file not in done, in (mtime, name) order, deferred)``.

        ``deferred`` counts the matching files skipped because they have not settled yet.
        """
        ready = []
        deferred = 0
        self.relanded = []
        for entry in self.list_directory():
            name = entry.name
            if name in done and not name.startswith((".", "_")):
                self._check_relanded(entry, done)
            if name.startswith((".", "_")) or name in done:
                continue
            if not any(fnmatch.fnmatch(name, p) for p in self.patterns):
                continue
            try:
                if not entry.is_file():
                    continue
                st = entry.stat()
            except OSError:
                continue  # vanished between listing and stat
            if Path(entry.path).absolute() == self.skip:
                continue
            sig = (st.st_size, st.st_mtime_ns)
            prev = self._seen.get(name)
            if prev is None or prev[0] != sig:
                # First sight: trust the mtime.  A change since the last scan
                # proves the file is being written: restart the settle clock.
                stable_since = st.st_mtime if prev is None else now
                self._seen[name] = (sig, stable_since)
            else:
                stable_since = prev[1]
            if st.st_size == 0 or now - max(stable_since, st.st_mtime) < self.settle_s:
                deferred += 1
                continue
            ready.append((st.st_mtime, name, st))
        ready.sort(key=lambda t: (t[0], t[1]))
        return ready, deferred

    def forget(self, name: str) -> None:
        """Drop the settle state of ``name`` (once it has been handled)."""
        self._seen.pop(name, None)

    def _check_relanded(self, entry: os.DirEntry, done: Container[str]) -> None:
        """A handled name whose file now has another size or mtime: new content the kit ignores
        (a file is known by its name).  Listed once per content in :attr:`relanded`, to be said."""
        handled = done.get(entry.name) if hasattr(done, "get") else None
        if not isinstance(handled, dict) or handled.get("size") is None:
            return
        try:
            st = entry.stat()
        except OSError:
            return
        sig = (st.st_size, st.st_mtime)
        if sig == (handled["size"], handled.get("mtime")) or self._reported.get(entry.name) == sig:
            return
        self._reported[entry.name] = sig
        self.relanded.append((entry.name, handled))


class Manifest:
    """``ingested.jsonl`` in the spool root: one JSON line per file handled, so each is handled once.

    An entry holds the file's name, size, mtime, seq, rows_ok and rows_bad.  A file is identified
    by its name: a later file with the same name is ignored.  A line torn by a crash is skipped
    (that file is examined again) and ended before the next entry is appended.

    :meth:`compact` (retention) drops the entries of files that are gone from the inbox; their
    counts live on in a first line ``{"compacted": {"files", "rows_ok", "rows_bad", "last_seq"}}``.
    """

    def __init__(self, spool: Spool) -> None:
        self.spool = spool
        self.path = f"{spool.root}/{MANIFEST_NAME}"
        self.done: dict[str, dict] = {}
        #: what compaction dropped: files, rows_ok, rows_bad, and the newest dataset among them
        self.compacted: dict[str, Any] = {"files": 0, "rows_ok": 0, "rows_bad": 0, "last_seq": None}
        self._torn = False
        self._load()

    def _load(self) -> None:
        fs = self.spool.filesystem
        if fs.get_file_info(self.path).type != pafs.FileType.File:
            return
        with fs.open_input_stream(self.path, compression=None) as f:
            raw = f.read()
        for line in raw.split(b"\n"):
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # blank, or a line torn by a crash: that file is re-examined
            if isinstance(entry, dict) and "file" in entry:
                self.done[str(entry["file"])] = entry
            elif isinstance(entry, dict) and isinstance(entry.get("compacted"), dict):
                self.compacted.update(entry["compacted"])
        self._torn = bool(raw) and not raw.endswith(b"\n")

    def recover_from_spool(self) -> None:
        """Record the spool's datasets whose ``source`` file is missing from the manifest."""
        # A crash after the spool append but before the manifest line would
        # otherwise make the next run ingest that file a second time.  Only datasets after the
        # newest one recorded can lack their line (one file is ingested at a time).
        seqs = [int(e["seq"]) for e in self.done.values() if e.get("seq") is not None]
        if self.compacted.get("last_seq") is not None:
            seqs.append(int(self.compacted["last_seq"]))
        for info in self.spool.datasets(max(seqs) + 1 if seqs else 0):
            if info.source and info.source != "generator" and info.source not in self.done:
                self.record(
                    {"file": info.source, "size": None, "mtime": None, "seq": info.seq,
                     "rows_ok": info.rows, "rows_bad": 0, "at": time.time(), "recovered": True}
                )

    def record(self, entry: dict) -> None:
        """Append ``entry`` (a dict with a ``"file"`` key) to the manifest."""
        fs = self.spool.filesystem
        line = (json.dumps(entry, separators=(",", ":")) + "\n").encode("utf-8")
        if self._torn:
            line = b"\n" + line  # end the torn line so ours parses
            self._torn = False
        with fs.open_append_stream(self.path, compression=None) as out:
            out.write(line)
        self.done[entry["file"]] = entry

    def compact(self, drop: Callable[[dict], bool]) -> int:
        """Rewrite the manifest without the entries ``drop(entry)`` picks; return how many went.

        Their counts are added to the ``compacted`` line, so totals stay whole.  The new file
        replaces the old one in one move: a crash leaves either.
        """
        gone = [name for name, entry in self.done.items() if drop(entry)]
        if not gone:
            return 0
        summary = dict(self.compacted)
        for name in gone:
            entry = self.done[name]
            summary["files"] = int(summary["files"]) + 1
            summary["rows_ok"] = int(summary["rows_ok"]) + int(entry.get("rows_ok") or 0)
            summary["rows_bad"] = int(summary["rows_bad"]) + int(entry.get("rows_bad") or 0)
            if entry.get("seq") is not None:
                summary["last_seq"] = max(int(entry["seq"]), int(summary["last_seq"] or 0))
        kept = {name: entry for name, entry in self.done.items() if name not in set(gone)}
        lines = [json.dumps({"compacted": summary}, separators=(",", ":"))]
        lines += [json.dumps(entry, separators=(",", ":")) for entry in kept.values()]
        fs = self.spool.filesystem
        tmp = f"{self.path}.tmp-{os.getpid()}"
        with fs.open_output_stream(tmp, compression=None) as out:
            out.write(("\n".join(lines) + "\n").encode("utf-8"))
        fs.move(tmp, self.path)
        self.done, self.compacted, self._torn = kept, summary, False
        return len(gone)
