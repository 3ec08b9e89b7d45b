"""kill -9 a stream's driver at random points while other processes reconfigure it; every row once.

    .venv/bin/python benchmarks/chaos_reconfigure.py                       # 10 kills, ~30 reconfigurations
    .venv/bin/python benchmarks/chaos_reconfigure.py --kills 3 --seed 1     # the short run the tests use

One run directory, one ``lmstream-kit run --workload PASSTHROUGH`` after another (each started on the same
``--out``, so it resumes the checkpoint, the spool and the journal).  While a run streams, other
processes reconfigure it with ``lmstream-kit reconfigure`` at random: a new latency target, a policy
switch (to or from ``fixed`` restarts the query), a plain restart, a new traffic rate.  At a random
moment, often while a reconfiguration is under way, the run's whole process group (the driver's
Python and Spark's JVM) gets SIGKILL.  The last run feeds ``--last`` simulated seconds, then drains
everything spooled (what the killed runs left pending too) and stops by itself.

With ``--workload LR2S`` (a stateful query over a sliding window) the window slide changes too, a
restart from the checkpoint with a new window.  With ``--workload flumina:EXAMPLE`` (a Flumina
program, e.g. ``flumina:value_barrier``, its states kept by the kit) its workers, their tags and
its logic change too, live, at a batch boundary: ``reconfigure --set flumina.workers=N`` forks or
joins the workers' states, ``--set "flumina.move=a2 -> w1"`` migrates a tag's state to another
worker, and ``--set flumina.logic=v2`` swaps the update function for one of the program's named
logics (its own, or the same one with its outputs labelled ``v2`` or ``v3``).  A kill during any
of them must leave the old or the new configuration, never a mix.

Then it checks what the reconfiguration issue asks:

* **no row lost or duplicated**: every spooled dataset went into exactly one batch (the batches'
  spans tile the spool); for PASSTHROUGH also the output's rows equal the spool's rows, once each;
* **the journal is consistent**: every transaction ended committed or aborted; its steps went in
  order (requested, prepared, applied, committed; aborted after any but committed); one a crash left
  open was ended by the next start (``recovered``);
* **one configuration in force**: each run's first batch ran under the policy it was started with,
  never a mix of an interrupted change;
* for a Flumina program, **the outputs equal the sequential run's** over every spooled event, each
  output once, whatever the workers were rescaled to and wherever the kills fell; the sequential
  run takes each batch under the logic the journal says was in force for it, and each batch's
  record must say it ran under that logic.

It writes ``chaos-reconfigure-<host>-<time>.json`` and ``.csv`` (one row per run: how it ended, the
reconfigurations asked and how each ended) and prints the verdict; exit status 1 where a check
failed.  Every number is **measured** on the machine named in the file.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.chaos_checks import span_problems
from lmstream_kit.bench.outputs import write_run_results  # noqa: E402

KIT = [sys.executable, "-m", "lmstream_kit"]
#: the order a transaction's steps may go in (aborted may follow any state but committed)
_NEXT = {None: {"requested"}, "requested": {"prepared", "aborted"}, "prepared": {"applied", "aborted"},
         "applied": {"committed", "aborted"}}


#: the Flumina program's workers at the start, its input shards (the most workers it can have: the
#: rescales go from 1 to this), and about one sync event per this many
FLUMINA_WORKERS, FLUMINA_SHARDS, FLUMINA_SYNC_EVERY = 2, 4, 200
#: the Flumina program's logics by name: its own, and the same update with its outputs labelled
#: (:func:`~lmstream_kit.flumina.examples.labelled`), so an output made under the wrong logic shows
FLUMINA_LOGICS = ("initial", "v2", "v3")


def flumina_example(workload: str) -> str | None:
    """``EXAMPLE`` of ``flumina:EXAMPLE`` (None for another workload)."""
    return workload.split(":", 1)[1] if workload.startswith("flumina:") else None


def workload_arg(run: Path, workload: str) -> str:
    """What ``run --workload`` gets: the name, or for ``flumina:EXAMPLE`` a workload file beside ``run``."""
    example = flumina_example(workload)
    if example is None:
        return workload
    path = run.parent / f"{run.name}-flumina.py"
    logics = ", ".join(f"{name!r}: labelled(update, {name!r})" for name in FLUMINA_LOGICS[1:])
    path.write_text("from lmstream_kit.flumina import EXAMPLES\n"
                    "from lmstream_kit.flumina.examples import labelled\n"
                    "from lmstream_kit.workloads.flumina import flumina_workload\n\n"
                    f"update = EXAMPLES.get({example!r}).spec({FLUMINA_SHARDS}).update\n"
                    f"W = flumina_workload({example!r}, parallelism={FLUMINA_WORKERS}, shards={FLUMINA_SHARDS}, "
                    f"sync_every={FLUMINA_SYNC_EVERY}, bound_s=5.0, logics={{{logics}}})\n")
    return f"{path}:W"


def start_run(run: Path, args, policy: str, log, duration: float, restore: bool = False) -> subprocess.Popen:
    """``lmstream-kit run --workload PASSTHROUGH`` on ``run`` in a new process group (its JVM goes with it);
    ``restore``: with ``--restore-config`` (it starts with what the journal last committed)."""
    cmd = [*KIT, "run", "--workload", workload_arg(run, args.workload), "--policy", policy,
           *(["--restore-config"] if restore else []), "--traffic", "random", "--rate", str(args.rate),
           "--speedup", str(args.speedup), "--seed", str(args.seed), "--out", str(run), "--output", "parquet",
           "--duration", f"{duration:g}"]
    return subprocess.Popen(cmd, stdout=log, stderr=log, start_new_session=True)


def channel(run: Path) -> str | None:
    try:
        return json.loads((run / "run.json").read_text()).get("channel")
    except (OSError, ValueError):
        return None


def batches(run: Path) -> int:
    try:
        with open(run / "metrics.jsonl") as fh:
            return sum(1 for _ in fh)
    except OSError:
        return 0


def wait_up(proc: subprocess.Popen, run: Path, old_channel: str | None, old_batches: int, timeout: float) -> None:
    """Until the new run serves its channel and completed a batch of its own."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the run exited with {proc.returncode} before it was up")
        if channel(run) not in (None, old_channel) and batches(run) > old_batches:
            return
        time.sleep(0.2)
    raise RuntimeError(f"the run was not up within {timeout:g} s")


def reconfigure(run: Path, rng: random.Random, windowed: bool, flumina: bool = False
                ) -> tuple[list[str], subprocess.Popen]:
    """Start one random ``lmstream-kit reconfigure`` on ``run`` (not waited for); a ``windowed``
    workload's window slide changes too (a restart from the checkpoint), a ``flumina`` program's
    workers too (live: a fork or a join of their states)."""
    op = rng.choice(["target", "policy", "policy", "restart", "rate", *(["slide", "slide"] if windowed else []),
                     *(["workers"] * 3 + ["logic"] * 3 + ["move"] * 2 if flumina else [])])
    if op == "workers":
        change = ["--set", f"flumina.workers={rng.choice(range(1, FLUMINA_SHARDS + 1))}"]
    elif op == "logic":
        change = ["--set", f"flumina.logic={rng.choice(FLUMINA_LOGICS)}"]
    elif op == "move":  # a tag's state to worker w1 or w2 (refused, in one line, where the plan has no such worker)
        change = ["--set", f"flumina.move=a{rng.randrange(FLUMINA_SHARDS)} -> w{rng.choice([1, 2])}"]
    elif op == "slide":
        change = ["--slide", f"{rng.choice([5, 10, 15]):g}"]
    elif op == "target":
        change = ["--target", f"{rng.choice([2, 4, 6, 10]):g}"]
    elif op == "policy":
        change = ["--policy", rng.choice(["lmstream", "asap", "fixed"])]
    elif op == "restart":
        change = ["--restart"]
    else:
        change = ["--rate-scale", f"{rng.choice([0.5, 1.0, 1.5]):g}"]
    proc = subprocess.Popen([*KIT, "reconfigure", str(run), *change], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    return change, proc


def journal_problems(run: Path) -> list[str]:
    """What is wrong with the journal: steps out of order, transactions left open."""
    entries = [json.loads(line) for line in (run / "reconfig.jsonl").read_text().splitlines() if line.strip()] \
        if (run / "reconfig.jsonl").is_file() else []
    state: dict[int, str | None] = {}
    problems = []
    for e in entries:
        txn, now = int(e["txn"]), e["state"]
        if now not in _NEXT.get(state.get(txn), set()):
            problems.append(f"transaction {txn} ({e.get('op')}) went from {state.get(txn)} to {now}")
        state[txn] = now
    problems += [f"transaction {t} left {s}" for t, s in state.items() if s not in ("committed", "aborted")]
    return problems


def rows(table) -> Counter:
    return Counter(zip(*(table.column(c).to_pylist() for c in table.column_names)))


def row_problems(run: Path) -> tuple[list[str], int]:
    """Rows of the spool missing from the output or there twice (or more), and the spool's row count."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from lmstream_kit.feed.spool import Spool

    fed = Spool(run / "spool", create=False).read_table()
    files = sorted((run / "output").glob("part-*.parquet"))
    out = pa.concat_tables([pq.read_table(f) for f in files]).select(fed.column_names) if files else fed.slice(0, 0)
    want, got = rows(fed), rows(out)
    missing = sum((want - got).values())
    extra = sum((got - want).values())
    problems = ([f"{missing} row(s) of the spool are not in the output"] if missing else []) + \
               ([f"{extra} output row(s) are duplicates or not in the spool"] if extra else [])
    return problems, fed.num_rows


def last_records(run: Path) -> dict[int, dict]:
    """The last record of each batch id (a batch replayed after a kill has the same id)."""
    last: dict[int, dict] = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            last[int(r["batch_id"])] = r
    return last


def logic_timeline(run: Path) -> list[tuple[int, str]]:
    """``(batch id, logic)``: each committed logic swap (``flumina_logic``) at the batch it was applied at."""
    entries = [json.loads(line) for line in (run / "reconfig.jsonl").read_text().splitlines() if line.strip()] \
        if (run / "reconfig.jsonl").is_file() else []
    applied = {int(e["txn"]): int(e["batch_id"]) for e in entries if e["state"] == "applied" and "batch_id" in e}
    committed = [(applied.get(int(e["txn"]), -1), e["txn"]) for e in entries
                 if e.get("op") == "flumina_logic" and e["state"] == "committed"]
    value = {int(e["txn"]): e["value"] for e in entries if e["state"] == "requested"}
    return sorted((at, value[int(txn)]) for at, txn in committed)


def flumina_problems(run: Path, example: str) -> tuple[list[str], int]:
    """Where a Flumina program's outputs differ from the sequential run over every spooled event
    (outputs compared as a bag, each once), and how many outputs there are.  The sequential run
    takes the batches in order, each under the logic the journal says was in force for it (a
    committed swap is in force from the batch it was applied at); each batch's record must say it
    ran under that logic."""
    import dataclasses

    import pyarrow as pa
    import pyarrow.parquet as pq

    from lmstream_kit.feed.spool import Spool
    from lmstream_kit.flumina import EXAMPLES, run_sequential
    from lmstream_kit.flumina.examples import labelled
    from lmstream_kit.flumina.tables import table_events
    from lmstream_kit.workloads.flumina import FLUMINA_EXAMPLES

    spool, codec = Spool(run / "spool", create=False), FLUMINA_EXAMPLES[example].codec
    spec = EXAMPLES.get(example).spec(FLUMINA_SHARDS)
    timeline = logic_timeline(run)
    problems = [f"a committed logic swap to {name!r} has no batch it was applied at" for at, name in timeline if at < 0]
    state, outputs = spec.init(), []
    for b, r in sorted(last_records(run).items()):
        if not r.get("rows"):
            continue
        logic = next((name for at, name in reversed(timeline) if at <= b), FLUMINA_LOGICS[0])
        if r.get("flumina_logic") != logic:
            problems.append(f"batch {b} ran under logic {r.get('flumina_logic')!r}, the journal says {logic!r}")
        run_spec = spec if logic == FLUMINA_LOGICS[0] else dataclasses.replace(spec, update=labelled(spec.update, logic))
        state, out = run_sequential(run_spec, table_events(spool.read_table(r["start_seq"], r["end_seq"]), codec=codec),
                                    state=state)
        outputs += out
    files = sorted((run / "output").glob("part-*.parquet"))
    got = Counter(pa.concat_tables([pq.read_table(f) for f in files]).column("output").to_pylist()) if files \
        else Counter()
    want = Counter(repr(o) for o in outputs)
    missing, extra = sum((want - got).values()), sum((got - want).values())
    problems += ([f"{missing} output(s) of the sequential run are not in the program's output"] if missing else []) \
        + ([f"{extra} output(s) are not the sequential run's, or there twice"] if extra else [])
    return problems, sum(want.values())


def restored(run: Path) -> dict:
    """What the running run took back from the journal (run.json's ``restored_config``), by op."""
    try:
        got = json.loads((run / "run.json").read_text()).get("restored_config") or {}
    except (OSError, ValueError):
        return {}
    return {op: v for op, v in got.items() if not (isinstance(v, str) and v.startswith("not restored"))}


def policy_of_record(run: Path, index: int) -> str | None:
    """The policy of the ``index``-th record of the run directory's metrics (0-based)."""
    with open(run / "metrics.jsonl") as fh:
        for i, line in enumerate(fh):
            if i == index:
                return json.loads(line).get("policy")
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=10, help="kill -9s of the driver (then one clean stop)")
    ap.add_argument("--workload", default="PASSTHROUGH", help="PASSTHROUGH (its output rows are checked one by one) "
                    "or a stateful one with a sliding window, e.g. LR2S (its window slide changes too)")
    ap.add_argument("--per-run", type=int, default=3, help="most reconfigurations asked of each run")
    ap.add_argument("--rate", type=float, default=400.0, help="rows per simulated second")
    ap.add_argument("--speedup", type=float, default=10.0)
    ap.add_argument("--last", dest="last_s", type=float, default=120.0,
                    help="simulated seconds the last run feeds before it drains and stops")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--run-dir", type=Path, default=None, help="the run directory [default: a temporary one]")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    flumina = flumina_example(args.workload) is not None
    if flumina:
        from lmstream_kit.workloads.flumina import FLUMINA_EXAMPLES

        if flumina_example(args.workload) not in FLUMINA_EXAMPLES:
            ap.error(f"unknown Flumina example in {args.workload!r}; known: {', '.join(FLUMINA_EXAMPLES)}")
    tmp = None
    if args.run_dir is None:
        tmp = Path(tempfile.mkdtemp(prefix="chaos-reconfigure-"))
        args.run_dir = tmp / "run"
    run = args.run_dir
    log = open(run.parent / f"{run.name}.log", "ab")
    runs, t_start = [], time.time()
    try:
        for i in range(args.kills + 1):
            policy = rng.choice(["lmstream", "lmstream", "asap"])
            before_channel, before_batches = channel(run), batches(run)
            final = i == args.kills
            # the runs that are killed stream until then; the last one feeds --last simulated seconds,
            # drains everything spooled (also what the killed runs left pending) and exits
            # a resumed run starts with the options given, or (--restore-config) with the journal's last committed
            restore = i > 0 and rng.random() < 0.5
            proc = start_run(run, args, policy, log, args.last_s if final else 1e6, restore)
            wait_up(proc, run, before_channel, before_batches, timeout=180)
            started_batches = batches(run)
            first_policy = policy_of_record(run, before_batches)  # the run's first batch
            if restore:  # the policy it starts with is the journal's, where one committed
                policy = restored(run).get("policy", policy)
            asked = []
            for k in range(rng.randint(1, args.per_run)):
                change, rp = reconfigure(run, rng, windowed=args.workload != "PASSTHROUGH" and not flumina,
                                         flumina=flumina)
                last = k == args.per_run - 1 or rng.random() < 0.4
                if i < args.kills and last:  # kill while this one is under way
                    time.sleep(rng.uniform(0.0, 2.0))
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    rp.wait(timeout=120)
                    asked.append({"change": " ".join(change), "rc": rp.returncode, "killed_during": True})
                    break
                out, err = rp.communicate(timeout=600)
                asked.append({"change": " ".join(change), "rc": rp.returncode,
                              "said": (out or err).strip().splitlines()[-1] if (out or err).strip() else ""})
                time.sleep(rng.uniform(0.5, 3.0))
            if proc.poll() is None and i < args.kills:  # not killed mid-change: kill between changes
                time.sleep(rng.uniform(0.0, 2.0))
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            ended = "killed"
            if final:
                proc.wait(timeout=600)
                ended = f"drained and stopped (exit {proc.returncode})"
            print(f"run {i + 1}/{args.kills + 1} ({policy}): {len(asked)} change(s), {ended}", flush=True)
            runs.append({"run": i + 1, "restore_config": restore, "policy": policy, "first_batch_policy": first_policy, "ended": ended,
                         "batches": batches(run) - before_batches, "changes": json.dumps(asked)})
        problems = journal_problems(run) + span_problems(run)
        problems += [f"run {r['run']} was started with {r['policy']} but its first batch ran under "
                     f"{r['first_batch_policy']}" for r in runs if r["first_batch_policy"] != r["policy"]]
        outputs = None
        if args.workload == "PASSTHROUGH":  # its output is its input: every row once
            lost, fed_rows = row_problems(run)
            problems += lost
        elif flumina:  # its outputs are the sequential run's
            wrong, outputs = flumina_problems(run, flumina_example(args.workload))
            problems += wrong
            from lmstream_kit.feed.spool import Spool

            fed_rows = Spool(run / "spool", create=False).total_rows()
        else:
            from lmstream_kit.feed.spool import Spool

            fed_rows = Spool(run / "spool", create=False).total_rows()
        if not runs[-1]["ended"].endswith("(exit 0)"):
            problems.append(f"the last run did not stop cleanly: {runs[-1]['ended']}")
        txns = {}
        for line in (run / "reconfig.jsonl").read_text().splitlines() if (run / "reconfig.jsonl").is_file() else []:
            e = json.loads(line)
            txns.setdefault(int(e["txn"]), []).append(e)
        ends = Counter(("recovered " if steps[-1].get("recovered") else "") + steps[-1]["state"]
                       for steps in txns.values())
        meta = {"benchmark": "chaos-reconfigure", "workload": args.workload, "kills": args.kills, "seed": args.seed, "rate": args.rate,
                "speedup": args.speedup, "wall_s": round(time.time() - t_start, 1), "spool_rows": fed_rows,
                "flumina_outputs": outputs, "ops": dict(Counter(op for r in runs for op in _ops(r["changes"]))),
                "transactions": len(txns), "transaction_ends": dict(ends), "problems": problems,
                "verdict": "pass" if not problems else "FAIL"}
        path = write_run_results(args.out, "chaos-reconfigure", meta, runs)
        held = ("every row once" if args.workload == "PASSTHROUGH" else
                f"every dataset in one batch, the {outputs} outputs the sequential run's" if flumina else
                "every dataset in one batch")
        print(f"{fed_rows} rows, {len(txns)} reconfigurations ({dict(ends)}), {args.kills} kill -9: "
              f"{(held + ', journal consistent') if not problems else '; '.join(problems)}")
        print(f"results: {path}")
        return 0 if not problems else 1
    finally:
        log.close()
        if tmp is not None and not os.environ.get("LMSTREAM_KEEP_CHAOS"):
            shutil.rmtree(tmp, ignore_errors=True)


def _ops(changes: str) -> list[str]:
    """The kinds of change a run was asked (``--set flumina.workers=3`` -> ``flumina.workers``)."""
    out = []
    for c in json.loads(changes):
        words = c["change"].split()
        out.append(words[1].split("=")[0] if words[0] == "--set" else words[0].lstrip("-"))
    return out


if __name__ == "__main__":
    sys.exit(main())
