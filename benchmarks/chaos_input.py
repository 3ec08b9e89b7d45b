"""kill -9 a stream that ingests the files landing in its --input directory; every landed row once.

    .venv/bin/python benchmarks/chaos_input.py                        # 20 kills
    .venv/bin/python benchmarks/chaos_input.py --kills 3 --seed 8     # the short run the tests use

One input directory, one run directory.  A writer in this process lands files in the input
directory all along, whatever happens to the stream: each by rename (``.NAME.tmp`` written, then
``os.replace``), in CSV, JSON Lines or Parquet, each row a PASSTHROUGH row whose ``vehicle`` is a
running number (unique); it keeps every file and row it landed.  One ``lmstream-kit run --workload
PASSTHROUGH --input DIR`` after another (each on the same ``--out``: it resumes the checkpoint, the
spool and the ingest manifest) streams until it gets SIGKILL at a point of one of four kinds:

* **mid-ingest**: just after a file landed, while the ingest takes it: half the time the moment its
  dataset reaches the spool's index (just before the manifest's line), else 0-1.2 s after it landed;
* **mid-batch**: right after ``metrics.jsonl`` grew: before Spark commits the batch, or while the
  next one runs;
* **first-batch**: soon after a restarted run's ``device mode`` line or its first batch record,
  often while it replays the batch the kill before cut short;
* **live-restart**: within 0.5 s of a live restart reaching the journal: ``lmstream-kit
  reconfigure RUN --policy fixed`` (or ``--restart``) from another process.

The kill goes to the whole process group (the driver's Python, Spark's JVM and its Python
workers) or to the driver's Python alone, which leaves the JVM and the source runner orphaned for a
while; the next run starts at once all the same (ports, the checkpoint, the spool), and the orphans
still alive then are recorded.  About a third of the runs use eager spool retention (``--retention
age=0s,batches=0``: committed data goes at once), the others the default.  Then the writer stops, a
last run takes what is left, catches up, and is stopped with SIGTERM (as cleanly as Ctrl-C).  The
script kills whatever of its runs' processes is still alive at the end.

Then it checks what the ingest issue asks:

* **0 lost, 0 duplicated**: the output's rows are the landed rows, once each; after each kill, so
  far: no row of a recorded batch missing from the output, none there twice;
* every spooled dataset went into exactly one batch (the batches' spans tile the spool);
* every landed file is in the ingest manifest once and in the spool once, with all its rows, and
  nothing went to the dead letters;
* the metrics survive the crashes: ``load_metrics`` reads the run's ``metrics.jsonl`` with what the
  kills left in it, and a copy whose last line is cut in half, as a kill mid-write leaves it.

It writes ``chaos-input-<host>-<time>.json`` and ``.csv`` (one row per kill: where it fell, the kind
of kill, the orphans seen at the next start, the rows landed, out, missing and duplicated so far;
then one for the clean stop) and prints a line per kill and the verdict; exit status 1 where a check
failed.  Every number is **measured** on the machine named in the file.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.chaos_checks import span_problems
from lmstream_kit.bench.outputs import write_run_results

KIT = [sys.executable, "-m", "lmstream_kit"]
#: where a kill falls, and how it is sent
POINTS = ("mid-ingest", "mid-batch", "first-batch", "live-restart")
KINDS = ("group", "driver")
#: the retention of about a third of the runs: committed spool data is deleted at once
EAGER_RETENTION = "age=0s,batches=0"
#: the formats files land in, by extension
FORMATS = ("csv", "jsonl", "parquet")


class RunEnded(RuntimeError):
    """The run exited by itself before the point it was to be killed at."""


# --------------------------------------------------------------------------------------- the plan


def plan(kills: int, seed: int) -> list[dict]:
    """Each kill's point, kind, and its run's retention and policy; then the last run's.

    Points and kinds go round in shuffled rounds, so that ``kills >= 4`` covers every point (and
    ``kills >= 2`` both kinds); the first kill is not a ``first-batch`` one where it can be helped
    (the first run is no restart).  Pure: the same for the same arguments.

    >>> sorted(k["point"] for k in plan(4, 0)[:4]) == sorted(POINTS), plan(3, 1) == plan(3, 1)
    (True, True)
    >>> plan(2, 0)[-1]["point"], plan(2, 0)[-1]["kind"]
    ('clean stop', 'SIGTERM')
    """
    rng = random.Random(seed)

    def rounds(items: tuple, n: int) -> list:
        out: list = []
        while len(out) < n:
            block = list(items)
            rng.shuffle(block)
            out += block
        return out[:n]

    points, kinds = rounds(POINTS, kills), rounds(KINDS, kills)
    if points and points[0] == "first-batch":
        other = next((i for i, p in enumerate(points) if p != "first-batch"), None)
        if other is not None:
            points[0], points[other] = points[other], points[0]
    eager = rounds((True, False, False), kills + 1)
    return [{"point": points[i] if i < kills else "clean stop", "kind": kinds[i] if i < kills else "SIGTERM",
             "retention": EAGER_RETENTION if eager[i] else "default",
             "policy": rng.choice(["lmstream", "lmstream", "asap"])} for i in range(kills + 1)]


# --------------------------------------------------------------------------------------- the writer


def write_file(path: Path, table, fmt: str) -> None:
    """``table`` as a CSV (with a header), JSON Lines or Parquet file at ``path``."""
    names = table.column_names
    if fmt == "parquet":
        import pyarrow.parquet as pq

        pq.write_table(table, path)
        return
    rows = zip(*(table.column(c).to_pylist() for c in names))
    if fmt == "csv":
        text = ",".join(names) + "\n" + "".join(",".join(str(v) for v in row) + "\n" for row in rows)
    else:
        text = "".join(json.dumps(dict(zip(names, row))) + "\n" for row in rows)
    path.write_text(text)


class Lander(threading.Thread):
    """Lands files of unique PASSTHROUGH rows in ``inbox`` until stopped, each by rename; keeps
    every file (``files``: name, format, rows, first id, when) and row (``tables``) it landed.

    A file holds ``rate / files_per_s`` rows on average (half to one and a half times that), the
    ``vehicle`` of its rows running on from the file before.
    """

    def __init__(self, inbox: Path, rate: float, files_per_s: float, seed: int) -> None:
        super().__init__(daemon=True, name="chaos-lander")
        self.inbox, self.rate, self.files_per_s, self.seed = Path(inbox), rate, files_per_s, seed
        self.files: list[dict] = []
        self.tables: list = []
        self.rows = 0
        self.changed = threading.Condition()
        self.stop_event = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        import numpy as np
        import pyarrow as pa

        from lmstream_kit.workloads import load_workload

        make_rows = load_workload("PASSTHROUGH").make_rows
        rng = np.random.default_rng([self.seed, 5])
        mean = max(1.0, self.rate / self.files_per_s)
        try:
            while not self.stop_event.is_set():
                k, first = len(self.files), self.rows
                n = max(1, int(rng.integers(int(mean * 0.5), int(mean * 1.5) + 1)))
                table = make_rows(k, n, rng)
                at = table.column_names.index("vehicle")
                table = table.set_column(at, table.schema.field(at), pa.array(range(first, first + n), pa.int32()))
                fmt = FORMATS[int(rng.integers(len(FORMATS)))]
                name = f"{k:06d}.{fmt}"
                tmp = self.inbox / f".{name}.tmp"
                write_file(tmp, table, fmt)
                os.replace(tmp, self.inbox / name)
                with self.changed:
                    self.files.append({"name": name, "format": fmt, "rows": n, "first": first, "at": time.time()})
                    self.tables.append(table)
                    self.rows += n
                    self.changed.notify_all()
                self.stop_event.wait(float(rng.uniform(0.5, 1.5)) / self.files_per_s)
        except BaseException as exc:  # noqa: BLE001  (reported in the verdict)
            self.error = exc

    def landed(self) -> tuple[int, int]:
        """``(files, rows)`` landed so far."""
        with self.changed:
            return len(self.files), self.rows

    def next_file(self, after: int, timeout: float) -> dict | None:
        """The file landed after the first ``after`` ones (waiting up to ``timeout`` s), or None."""
        with self.changed:
            self.changed.wait_for(lambda: len(self.files) > after or self.stop_event.is_set(), timeout)
            return self.files[after] if len(self.files) > after else None

    def by_name(self) -> dict[str, dict]:
        with self.changed:
            return {f["name"]: f for f in self.files}

    def table(self):
        import pyarrow as pa

        with self.changed:
            return pa.concat_tables(self.tables) if self.tables else None


# ------------------------------------------------------------------------------------ the run dir


class NewRecords:
    """The records appended to ``metrics.jsonl`` since this was made (a run's start), read as they
    come; a line that does not parse (what a kill mid-write left, or its newline) is no record."""

    def __init__(self, run: Path) -> None:
        self.path = run / "metrics.jsonl"
        try:
            self.offset = self.path.stat().st_size
        except OSError:
            self.offset = 0
        self.tail = b""
        self.records: list[dict] = []

    def poll(self) -> list[dict]:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except OSError:
            return self.records
        self.offset += len(data)
        *lines, self.tail = (self.tail + data).split(b"\n")
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and "batch_id" in record:
                self.records.append(record)
        return self.records


def metrics(run: Path) -> list[dict]:
    """The run's batch records (what kills left in the file skipped, as ``load_metrics`` does)."""
    from lmstream_kit.metrics import read_jsonl

    return read_jsonl(run / "metrics.jsonl")


def spool_datasets(run: Path) -> list:
    """Every dataset of the run's spool (index lines only: retention may have deleted the data)."""
    from lmstream_kit.exceptions import SpoolError
    from lmstream_kit.feed.spool import Spool

    if not (run / "spool" / "meta.json").is_file():
        return []
    for attempt in range(3):
        try:
            return Spool(run / "spool", create=False).datasets()
        except SpoolError:  # a restarting run cutting a torn index line off just as it was read
            if attempt == 2:
                raise
            time.sleep(0.3)
    return []


def jsonl_entries(path: Path, key: str) -> list[dict]:
    """The JSON objects with ``key`` of a JSON-lines file, one per line; a line that does not parse
    (one a kill cut short) is skipped."""
    out = []
    for line in path.read_bytes().split(b"\n") if path.is_file() else []:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and key in entry:
            out.append(entry)
    return out


def manifest_entries(run: Path) -> list[dict]:
    """The ingest manifest's entries (``spool/ingested.jsonl``), one per file handled."""
    return jsonl_entries(run / "spool" / "ingested.jsonl", "file")


def journal(run: Path) -> list[dict]:
    """The reconfiguration journal's entries (``reconfig.jsonl``)."""
    return jsonl_entries(run / "reconfig.jsonl", "txn")


def output_ids(run: Path):
    """The ``vehicle`` of every output row, and how many output files could not be read."""
    import numpy as np
    import pyarrow.parquet as pq

    parts, unreadable = [], 0
    for f in sorted((run / "output").glob("part-*.parquet")):
        try:
            parts.append(pq.read_table(f, columns=["vehicle"]).column("vehicle").to_numpy())
        except Exception:  # noqa: BLE001  (a file being replaced just now; counted)
            unreadable += 1
    return (np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)), unreadable


def measure(run: Path, lander: Lander) -> dict:
    """What the run directory holds now, by the rows' ids: the rows landed, those of the batches
    recorded so far (``rows_batched``), the output's rows, those of recorded batches missing from
    it, those there twice (or never landed), and the landed rows no batch has taken yet (``pending``).

    Read in the order the run writes them (batch records, spool index, then what landed, then the
    output), so that a run writing meanwhile shows no row missing that is not.
    """
    import numpy as np

    try:
        records = metrics(run)
    except Exception as exc:  # noqa: BLE001  (a corrupt line: the verdict says it)
        return {"error": f"metrics unreadable: {exc}"}
    end = max((int(r["end_seq"]) for r in records if r.get("rows") and r.get("end_seq") is not None), default=0)
    datasets = spool_datasets(run)[:end]
    files = lander.by_name()  # after the spool's index: every file spooled has landed
    landed = sum(f["rows"] for f in files.values())
    expected = np.zeros(landed, dtype=bool)  # the ids run from 0 to the rows landed
    unknown = 0
    for d in datasets:
        f = files.get(d.source)
        if f is None:
            unknown += 1
        else:
            expected[f["first"]:f["first"] + f["rows"]] = True
    ids, unreadable = output_ids(run)
    known = (ids >= 0) & (ids < landed)
    counts = np.bincount(ids[known].astype(np.int64), minlength=landed)
    missing = int(np.count_nonzero(expected & (counts[:landed] == 0)))
    duplicated = int(np.clip(counts - 1, 0, None).sum()) + int(np.count_nonzero(~known))
    batched = int(expected.sum())
    out = {"files_landed": len(files), "rows_landed": landed, "rows_batched": batched, "rows_out": int(ids.size),
           "missing": missing, "duplicated": duplicated, "pending": landed - batched}
    if unknown or unreadable:
        out["error"] = f"{unknown} dataset(s) of no landed file, {unreadable} output file(s) unreadable"
    return out


def ingest_state(run: Path, name: str) -> str:
    """How far the ingest took the file ``name``."""
    spooled = any(d.source == name for d in spool_datasets(run))
    listed = any(e["file"] == name for e in manifest_entries(run))
    return ("in the spool and the manifest" if spooled and listed else "in the spool, not yet in the manifest"
            if spooled else "in the manifest only" if listed else "not yet in the spool")


# ------------------------------------------------------------------------------------- processes


def start_run(args, run: Path, inbox: Path, step: dict, duration: float, log) -> subprocess.Popen:
    """``lmstream-kit run --workload PASSTHROUGH --input INBOX`` on ``run`` in a new process group
    (its JVM and the JVM's Python workers join it)."""
    cmd = [*args.kit, "run", "--workload", "PASSTHROUGH", "--input", str(inbox), "--policy", step["policy"],
           "--speedup", f"{args.speedup:g}", "--out", str(run), "--output", "parquet", "--duration", f"{duration:g}",
           *(["--retention", step["retention"]] if step["retention"] != "default" else [])]
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})


def group_members(pgid: int, since: float) -> list:
    """The live processes of process group ``pgid`` made since ``since`` (epoch s): a run's, also
    after its leader died (the JVM and its Python workers stay in the group)."""
    import psutil

    out = []
    for p in psutil.process_iter(["name", "create_time", "status"]):
        try:
            if p.info["status"] == psutil.STATUS_ZOMBIE or p.info["create_time"] < since - 1.0:
                continue
            if os.getpgid(p.pid) == pgid:
                out.append(p)
        except (ProcessLookupError, psutil.Error, OSError):
            continue
    return out


def names(procs: list) -> str:
    """``java, python x2``: the processes' names, counted."""
    seen: Counter = Counter()
    for p in procs:
        try:
            seen[p.name()] += 1
        except Exception:  # noqa: BLE001  (gone meanwhile)
            seen["?"] += 1
    return ", ".join(f"{n}" if c == 1 else f"{n} x{c}" for n, c in sorted(seen.items()))


def tree(pid: int) -> list:
    import psutil

    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def kill(proc: subprocess.Popen, kind: str) -> None:
    """SIGKILL to the run's whole process group, or to its driver's Python alone."""
    try:
        if kind == "group":
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            os.kill(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def wait_until(proc: subprocess.Popen, done, timeout: float, poll: float, what: str):
    """Poll ``done()`` until it returns something true; RunEnded if the run exits first, None on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        got = done()
        if got:
            return got
        if proc.poll() is not None:
            raise RunEnded(f"the run exited with {proc.returncode} while waiting for {what}")
        if time.monotonic() > deadline:
            return None
        time.sleep(poll)


# ------------------------------------------------------------------------------------ kill points


def point_first_batch(proc, log_path: Path, new: NewRecords, rng: random.Random) -> str:
    """Soon after the run's ``device mode`` line (or its first batch record, whichever comes
    first), or after its first batch record."""
    by_line = rng.random() < 0.5

    def device_line():
        try:
            return "device mode" in log_path.read_text(errors="replace")
        except OSError:
            return False

    if by_line:
        got = wait_until(proc, lambda: ("device mode line" if device_line() else
                                        "first batch record" if new.poll() else None), 240, 0.05, "its start")
    else:
        got = wait_until(proc, lambda: "first batch record" if new.poll() else None, 240, 0.02, "its first batch")
    if got is None:
        return "not up within 240 s"
    delay = rng.uniform(0.0, 0.5)
    time.sleep(delay)
    return f"{delay:.2f} s after its {got}"


def point_mid_ingest(proc, run: Path, lander: Lander, rng: random.Random) -> tuple[str, str | None]:
    """Just after a file landed: half the time the moment its dataset reaches the spool's index (the
    ingest's append, just before its manifest line), else 0-1.2 s after it landed (settling, or
    being read)."""
    f = lander.next_file(lander.landed()[0], timeout=30)
    if f is None:
        return "no file landed within 30 s", None
    index = run / "spool" / "index.jsonl"
    if rng.random() < 0.5:
        try:
            offset = index.stat().st_size
        except OSError:
            offset = 0
        name = json.dumps(f["name"]).encode()

        def spooled() -> bool:
            try:
                with open(index, "rb") as fh:
                    fh.seek(offset)
                    return name in fh.read()
            except OSError:
                return False

        took = wait_until(proc, spooled, 5.0, 0.002, "the ingest")
        delay = rng.uniform(0.0, 0.01)
        time.sleep(delay)
        how = (f"{delay:.3f} s after its dataset reached the spool's index" if took
               else "its dataset did not reach the spool's index within 5 s")
    else:
        delay = rng.uniform(0.0, 1.2)
        time.sleep(max(0.0, f["at"] + delay - time.time()))
        how = f"{delay:.2f} s after it landed"
    return f"{f['name']}: {how}", f["name"]


def point_mid_batch(proc, new: NewRecords, rng: random.Random) -> str:
    """Right after ``metrics.jsonl`` grew: within 0.05 s (before Spark commits the batch, as a rule)
    or 0.05-1 s (planning or running the next batch)."""
    seen = len(new.poll())
    got = wait_until(proc, lambda: len(new.poll()) > seen, 60, 0.005, "a batch")
    if got is None:
        return "no batch within 60 s"
    delay = rng.uniform(0.0, 0.05) if rng.random() < 0.5 else rng.uniform(0.05, 1.0)
    time.sleep(delay)
    return f"{delay:.3f} s after batch {new.records[seen]['batch_id']} was recorded"


def point_live_restart(args, proc, run: Path, policy: str, rng: random.Random, asked: list) -> tuple[str, int | None]:
    """Within 0.5 s of a live restart reaching the journal: ``reconfigure --policy fixed`` (a new
    trigger: the query restarts) or ``--restart``, from another process."""
    change = ["--policy", "fixed"] if policy != "fixed" and rng.random() < 0.6 else ["--restart"]
    last = max((int(e.get("txn", 0)) for e in journal(run)), default=0)
    rp = subprocess.Popen([*args.kit, "reconfigure", str(run), *change], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    asked.append(rp)

    def begun():
        txns = [int(e["txn"]) for e in journal(run) if int(e.get("txn", 0)) > last]
        return txns[0] if txns else ("gone" if rp.poll() is not None else None)

    txn = wait_until(proc, begun, 120, 0.02, "the reconfiguration")
    delay = rng.uniform(0.0, 0.5)
    time.sleep(delay)
    if txn == "gone" or txn is None:
        return f"{' '.join(change)}: not journaled ({'the call ended first' if txn else 'not within 120 s'})", None
    return f"{' '.join(change)}: {delay:.2f} s after transaction {txn} was requested", int(txn)


# ------------------------------------------------------------------------------------------ checks


def row_problems(run: Path, landed) -> list[str]:
    """The landed rows missing from the output, or there twice (or never landed): whole rows compared."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = sorted((run / "output").glob("part-*.parquet"))
    out = pa.concat_tables([pq.read_table(f) for f in files]).select(landed.column_names) if files \
        else landed.slice(0, 0)

    def rows(table) -> Counter:
        return Counter(zip(*(table.column(c).to_pylist() for c in table.column_names)))

    want, got = rows(landed), rows(out)
    missing, extra = sum((want - got).values()), sum((got - want).values())
    return ([f"{missing} row(s) landed are not in the output"] if missing else []) + \
           ([f"{extra} output row(s) are duplicates or were never landed"] if extra else [])


def ingest_problems(run: Path, files: dict[str, dict]) -> list[str]:
    """Every landed file once in the ingest manifest and once in the spool, with all its rows; no
    dataset or entry of a file that never landed; no dead letter."""
    from lmstream_kit.metrics import read_jsonl

    problems = []
    sources = Counter(d.source for d in spool_datasets(run))
    rows = {d.source: int(d.rows) for d in spool_datasets(run)}
    entries = manifest_entries(run)
    listed = Counter(e["file"] for e in entries)
    by_entry = {e["file"]: e for e in entries}
    for what, seen in (("spool", sources), ("manifest", listed)):
        absent = sorted(n for n in files if seen[n] == 0)
        twice = sorted(n for n in files if seen[n] > 1)
        stray = sorted(n for n in seen if n not in files)
        problems += [f"{len(absent)} landed file(s) are not in the {what}, e.g. {absent[0]}"] if absent else []
        problems += [f"{len(twice)} landed file(s) are in the {what} more than once, e.g. {twice[0]}"] if twice else []
        problems += [f"the {what} holds {len(stray)} file(s) that never landed, e.g. {stray[0]}"] if stray else []
    short = sorted(n for n, f in files.items() if n in rows and rows[n] != f["rows"])
    problems += [f"{len(short)} file(s) have other row counts in the spool than landed, e.g. {short[0]}"] if short else []
    off = sorted(n for n, f in files.items() if n in by_entry and (int(by_entry[n].get("rows_ok") or 0) != f["rows"]
                                                                  or int(by_entry[n].get("rows_bad") or 0)))
    problems += [f"{len(off)} file(s) have other row counts in the manifest than landed, e.g. {off[0]}"] if off else []
    dead = read_jsonl(run / "dead_letter.jsonl")
    problems += [f"{len(dead)} dead letter(s), e.g. {dead[0].get('file')}: {dead[0].get('reason')}"] if dead else []
    return problems


def metrics_problems(run: Path) -> tuple[list[str], int]:
    """Whether ``load_metrics`` reads the run (with the lines kills cut short in it), and a copy
    whose last line is cut in half; and how many lines of the run's metrics do not parse."""
    from lmstream_kit.exceptions import one_line
    from lmstream_kit.metrics import load_metrics

    raw = (run / "metrics.jsonl").read_bytes()
    torn = 0
    for line in raw.split(b"\n"):
        if line.strip():
            try:
                json.loads(line)
            except ValueError:
                torn += 1
    problems = []
    try:
        whole = len(load_metrics(run))
    except Exception as exc:  # noqa: BLE001
        return [f"load_metrics fails on the run's metrics.jsonl: {one_line(exc)}"], torn
    lines = raw[: raw.rfind(b"\n") + 1].rstrip(b"\n").split(b"\n")  # its complete lines
    try:
        json.loads(lines[-1])
    except ValueError:
        return problems, torn  # no record to cut last (none at all, or the last line is what a kill left)
    with tempfile.TemporaryDirectory(prefix="chaos-input-cut-") as tmp:
        cut = b"\n".join(lines[:-1] + [lines[-1][: len(lines[-1]) // 2]])
        (Path(tmp) / "metrics.jsonl").write_bytes(cut)
        for name in ("run.json", "spark_progress.jsonl"):
            if (run / name).is_file():
                shutil.copy(run / name, Path(tmp) / name)
        try:
            got = len(load_metrics(tmp))
            if got != whole - 1:
                problems.append(f"load_metrics read {got} records of a metrics.jsonl whose last of {whole} is cut")
        except Exception as exc:  # noqa: BLE001
            problems.append(f"load_metrics fails on a metrics.jsonl whose last line is cut: {one_line(exc)}")
    return problems, torn


def journal_problems(run: Path) -> list[str]:
    """The journal reads (``Journal``, as a restarted run reads it), and after the clean stop no
    transaction is left open: each the kills cut short was ended by the next start."""
    from lmstream_kit.journal import Journal

    left = Journal(run).open()
    return [f"transaction {t['txn']} ({t['op']}) was left {t['state']}" for t in left]


def caught_up(run: Path, files: dict[str, dict]) -> bool:
    """Every landed file is in the manifest and the spool, and the batches took every dataset."""
    try:
        listed = {e["file"] for e in manifest_entries(run)}
        datasets = spool_datasets(run)
        if not set(files) <= listed or not set(files) <= {d.source for d in datasets}:
            return False
        records = metrics(run)
    except Exception:  # noqa: BLE001  (the checks after the stop say what is wrong)
        return False
    end = max((int(r["end_seq"]) for r in records if r.get("rows") and r.get("end_seq") is not None), default=0)
    return end == len(datasets)


# -------------------------------------------------------------------------------------------- main


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=20, help="kill -9s of the driver (then one clean stop)")
    ap.add_argument("--rate", type=float, default=400.0, help="rows per wall second the writer lands")
    ap.add_argument("--files-per-s", type=float, default=2.0, help="files per wall second the writer lands")
    ap.add_argument("--speedup", type=float, default=4.0, help="the runs' speedup (their latency bound is 10 s / it)")
    ap.add_argument("--stream", dest="stream_s", type=float, default=8.0,
                    help="most wall seconds a run streams after its first batch before its kill point is "
                         "sought (a first-batch kill does not wait)")
    ap.add_argument("--last", dest="last_s", type=float, default=300.0,
                    help="most wall seconds the last run has to catch up before it is stopped")
    ap.add_argument("--orphan-grace", type=float, default=60.0,
                    help="seconds an orphan of a killed run may live; older ones are killed (and counted)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--run-dir", type=Path, default=None, help="the run directory [default: a temporary one]")
    ap.add_argument("--keep", action="store_true",
                    help="keep the temporary run directory, its input directory and logs (the path is printed)")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    ap.add_argument("--kit", type=shlex.split, default=KIT, help=argparse.SUPPRESS)  # tests: a stand-in command
    args = ap.parse_args(argv)
    if args.kills < 0 or min(args.rate, args.files_per_s, args.speedup, args.last_s) <= 0:
        ap.error("--kills must be >= 0; --rate, --files-per-s, --speedup and --last > 0")
    keep = args.keep or bool(os.environ.get("LMSTREAM_KEEP_CHAOS"))
    steps = plan(args.kills, args.seed)
    rng = random.Random(f"chaos-input-{args.seed}")  # the moments; the plan has its own

    tmp = None
    if args.run_dir is None:
        tmp = Path(tempfile.mkdtemp(prefix="chaos-input-"))
        args.run_dir = tmp / "run"
    run = args.run_dir.absolute()
    inbox, logs = run.parent / f"{run.name}-inbox", run.parent / f"{run.name}-logs"
    inbox.mkdir(parents=True, exist_ok=True)
    logs.mkdir(parents=True, exist_ok=True)
    lander = Lander(inbox, args.rate, args.files_per_s, args.seed)
    groups: list[list] = []  # [pgid, started, ended] of every run: its processes are found by them
    asked: list[subprocess.Popen] = []  # the reconfigure calls
    rows: list[dict] = []
    problems: list[str] = []
    reaped, failures = 0, 0
    t_start = time.time()
    proc = None
    try:
        lander.start()
        previous: dict | None = None  # the row of the run before: its orphans are counted at this start
        for i, step in enumerate(steps):
            final = i == args.kills
            if final:  # the writer stops; the last run takes what is left
                lander.stop_event.set()
                lander.join(timeout=60)
            for pgid, g_started, g_ended in groups:  # orphans past their grace are killed, and counted
                if g_ended is not None and time.time() - g_ended > args.orphan_grace:
                    for p in group_members(pgid, g_started):
                        with contextlib.suppress(Exception):  # gone meanwhile
                            p.kill()
                            reaped += 1
            if previous is not None:
                alive = group_members(groups[-1][0], groups[-1][1])
                previous["orphans_at_next_start"] = f"{len(alive)}" + (f": {names(alive)}" if alive else "")
            log_path = logs / f"run-{i + 1:02d}.log"
            new = NewRecords(run)
            started = time.time()
            with open(log_path, "wb") as log:
                proc = start_run(args, run, inbox, step, args.last_s + 120 if final else 1e6, log)
            groups.append([proc.pid, started, None])
            if previous is not None:  # measured while this run starts (it only appends meanwhile)
                previous.update(measure(run, lander))
                _report(previous, args.kills)
            row = {"kill": "-" if final else i + 1, "point": step["point"], "kind": step["kind"],
                   "policy": step["policy"], "retention": step["retention"]}
            name = txn = None
            try:
                if final:
                    done = wait_until(proc, lambda: caught_up(run, lander.by_name()), args.last_s, 1.0,
                                      "it to catch up")
                    row["up_s"] = round(new.records[0]["completed_at"] - started, 1) \
                        if new.poll() and new.records[0].get("completed_at") else None
                    row["detail"] = (f"caught up {time.time() - started:.1f} s after its start" if done
                                     else f"not caught up within {args.last_s:g} s")
                    proc.send_signal(signal.SIGTERM)  # as `kill PID` does: it stops as cleanly as on Ctrl-C
                    try:
                        proc.wait(timeout=180)
                        row["ended"] = f"drained and stopped (exit {proc.returncode})"
                    except subprocess.TimeoutExpired:
                        kill(proc, "group")
                        row["ended"] = "did not stop within 180 s of SIGTERM: killed"
                else:
                    if step["point"] == "first-batch":
                        row["detail"] = point_first_batch(proc, log_path, new, rng)
                    else:
                        up = wait_until(proc, new.poll, 240, 0.2, "its first batch")
                        row["up_s"] = round(time.time() - started, 1) if up else None
                        if not up:
                            problems.append(f"run {i + 1} completed no batch within 240 s of its start")
                        time.sleep(rng.uniform(0.5, max(0.5, args.stream_s)))
                        if step["point"] == "mid-ingest":
                            row["detail"], name = point_mid_ingest(proc, run, lander, rng)
                        elif step["point"] == "mid-batch":
                            row["detail"] = point_mid_batch(proc, new, rng)
                        else:
                            row["detail"], txn = point_live_restart(args, proc, run, step["policy"], rng, asked)
                    row["processes_at_kill"] = names(tree(proc.pid))
                    row["killed_at_s"] = round(time.time() - t_start, 1)
                    kill(proc, step["kind"])
                    deadline = time.monotonic() + (2.0 if step["kind"] == "group" else 0.0)
                    alive = group_members(proc.pid, started)
                    while alive and time.monotonic() < deadline:  # a killed group takes a moment to go
                        time.sleep(0.05)
                        alive = group_members(proc.pid, started)
                    row["orphans_after_kill"] = f"{len(alive)}" + (f": {names(alive)}" if alive else "")
                    row["ended"] = "killed"
                    if name is not None:
                        row["detail"] += f"; {ingest_state(run, name)} at the kill"
                    if txn is not None:
                        states = [e["state"] for e in journal(run) if int(e.get("txn", 0)) == txn]
                        row["detail"] += f"; {states[-1] if states else '?'} at the kill"
                failures = 0
            except RunEnded as exc:
                row["ended"] = f"exited {proc.returncode} by itself"
                row["detail"] = f"{exc}: {_last_line(log_path)}"
                problems.append(f"run {i + 1} exited with {proc.returncode} before its "
                                f"{'clean stop' if final else 'kill'}: {_last_line(log_path)}")
                failures += 1
            groups[-1][2] = time.time()
            rows.append(row)
            previous = None if final else row
            if final:
                print(f"last run ({step['policy']}, retention {step['retention']}): {row.get('detail', '')}; "
                      f"{row['ended']}", flush=True)
            elif failures >= 3:
                problems.append("3 runs in a row exited by themselves: no more kills")
                break
        if previous is not None:  # the kills stopped early
            previous.update(measure(run, lander))
            _report(previous, args.kills)
        for rp in asked:
            try:
                rp.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                rp.kill()
                rp.communicate()

        # ------------------------------------------------------------------ the checks
        lander.stop_event.set()
        lander.join(timeout=60)
        files, landed = lander.by_name(), lander.table()
        if lander.error is not None:
            problems.append(f"the writer failed: {lander.error}")
        end: dict = {}
        torn = 0
        if landed is None:
            problems.append("nothing landed")
        elif not (run / "spool" / "meta.json").is_file() or not (run / "metrics.jsonl").is_file():
            problems.append("the runs spooled or recorded nothing")
        else:
            import pyarrow.parquet as pq

            pq.write_table(landed, run.parent / f"{run.name}-landed.parquet")  # what landed, beside the run
            (run.parent / f"{run.name}-landed.json").write_text(json.dumps(list(files.values()), indent=0) + "\n")
            end = measure(run, lander)
            problems += [end["error"]] if end.get("error") else []
            for check, check_args in ((row_problems, (run, landed)), (span_problems, (run,)),
                                      (ingest_problems, (run, files)), (journal_problems, (run,))):
                try:
                    problems += check(*check_args)
                except Exception as exc:  # noqa: BLE001  (what made the check fail is the finding)
                    problems.append(f"{check.__name__} failed: {type(exc).__name__}: {exc}")
            wrong, torn = metrics_problems(run)
            problems += wrong
        killed = [r for r in rows if r["kill"] != "-"]
        for r in killed:
            if r.get("missing") or r.get("duplicated"):
                problems.append(f"after kill {r['kill']} ({r['point']}, {r['kind']}): {r.get('missing')} row(s) "
                                f"of recorded batches missing from the output, {r.get('duplicated')} there twice")
        if not rows or rows[-1]["kill"] != "-" or not str(rows[-1].get("ended", "")).endswith("(exit 0)"):
            problems.append(f"the last run did not stop cleanly: {rows[-1].get('ended') if rows else 'no run'}")
        if rows and rows[-1]["kill"] == "-":
            rows[-1].update(end)
        meta = {"benchmark": "chaos-input", "kills": args.kills, "seed": args.seed, "rate": args.rate,
                "files_per_s": args.files_per_s, "speedup": args.speedup, "wall_s": round(time.time() - t_start, 1),
                "files": len(files), "files_by_format": dict(Counter(f["format"] for f in files.values())),
                "rows": landed.num_rows if landed is not None else 0, "rows_out": end.get("rows_out"),
                "missing": end.get("missing"), "duplicated": end.get("duplicated"),
                "points": dict(Counter(r["point"] for r in killed)), "kinds": dict(Counter(r["kind"] for r in killed)),
                "eager_retention_runs": sum(r["retention"] != "default" for r in rows),
                "kills_with_orphans_at_next_start": sum(str(r.get("orphans_at_next_start", "0")) != "0"
                                                        for r in killed),
                "orphans_killed_after_grace": reaped, "torn_metrics_lines": torn,
                "problems": problems, "verdict": "pass" if not problems else "FAIL"}
        path = write_run_results(args.out, "chaos-input", meta, rows)
        print(f"{meta['rows']} rows in {len(files)} files ({meta['files_by_format']}) landed while the driver was "
              f"killed {len(killed)} times ({meta['points']}; {meta['kinds']}): "
              f"{'0 lost, 0 duplicated' if not problems else '; '.join(problems)}")
        print(f"results: {path}")
        if keep:
            print(f"run directory: {run}")
        return 0 if not problems else 1
    finally:
        lander.stop_event.set()
        if proc is not None and proc.poll() is None:
            kill(proc, "group")
        for rp in asked:
            if rp.poll() is None:
                rp.kill()
                rp.wait()
        for pgid, g_started, _ in groups:  # whatever of the runs is still alive: orphaned JVMs above all
            for p in group_members(pgid, g_started):
                with contextlib.suppress(Exception):  # gone meanwhile
                    p.kill()
        if tmp is not None and not keep:
            shutil.rmtree(tmp, ignore_errors=True)


def _last_line(log_path: Path) -> str:
    """The last non-blank line of a run's log (where a run that exited says why)."""
    try:
        lines = [ln.strip() for ln in log_path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


def _report(row: dict, kills: int) -> None:
    """One progress line for a kill."""
    print(f"kill {row['kill']}/{kills} ({row['point']}, {row['kind']}, {row['policy']}, retention {row['retention']}): "
          f"{row.get('detail', '')}; orphans at the next start {row.get('orphans_at_next_start', '?')}; "
          f"landed {row.get('rows_landed')} rows, out {row.get('rows_out')}, missing {row.get('missing')}, "
          f"duplicated {row.get('duplicated')}" + (f"; {row['error']}" if row.get("error") else ""), flush=True)


if __name__ == "__main__":
    sys.exit(main())
