"""Going on with an interrupted bench: what a bench directory already measured, and whether a
command may resume it.

A sweep with the capacity search runs for hours (``bench --preset paper``), longer than a
laptop stays awake or a lab session lasts.  Every finished cell is a line of ``cells.jsonl``
and every finished capacity probe a line of ``capacity.jsonl``, written as they finish; a
bench started again with ``resume=True`` (``bench --resume``) keeps them and runs only the
rest.  It must measure the same way: :data:`RESUME_KEYS` are the settings that change what a
cell measures, and a command that differs in one of them from the directory's
:data:`CONFIG_FILE` is refused with the first difference named.  A command that changes only
how the capacity search probes (:data:`PROBE_KEYS`: a longer probe, say) keeps the cells and
starts the search over; the old probes are set aside, not deleted.  The sweep's shape (queries,
policies, traffic, repetitions, overload cells, the probe limit and the budget) may differ: a
resumed bench runs the cells of its own command, keeping those already measured.

A cell that failed, or whose run directory is gone, runs again, and so do the other policies of its
group (the same query, traffic, repetition, rate and load: :func:`group_key`), because the bench
compares policies only side by side, run back to back on one JVM (:func:`side_by_side`).
``remeasure`` (``bench --resume --remeasure QUERY``) runs a query's groups again on purpose.  A
probe cut short by the interruption was never logged, so it runs again too.  A query whose cells at a
share of asap's capacity are still to run, and whose probes ran on another machine (a later
session's VM, whose speed may differ by 2x), is searched again on this one, starting where its
bracket was (:func:`searched_elsewhere`, :func:`search_starts`); its old probes, and their
journals, are set aside.  The capacity search replays the
logged probes into its searches (each search asks for the same rates again) and counts
their wall seconds against the budget.  The kit's code may have changed between the parts:
the settings file lists the source commit of each (``commits``), and the bench's meta with it.

Examples
--------
>>> import tempfile, json
>>> from pathlib import Path
>>> d = Path(tempfile.mkdtemp())
>>> start(d, {"speedup": 2.0, "duration_s": 120.0, "queries": ["LR2S"]}, "2026-11-25T02:00:00+00:00")
{'config': {'speedup': 2.0, 'duration_s': 120.0, 'queries': ['LR2S']}, 'controller_defaults': {'cold_start': 3, 'heap_admit': False, 'cold_evictions': 2, 'evict_horizon': True, 'cold_fraction': 0.5}, 'started_at': '2026-11-25T02:00:00+00:00', 'resumed_at': [], 'commits': [None]}
>>> check(d, {"speedup": 4.0, "duration_s": 120.0, "queries": ["LR1S"]})
Traceback (most recent call last):
...
lmstream_kit.exceptions.ConfigError: cannot resume the bench in ... its speedup was 2.0, this command gives 4.0 (give the same options, or start a new bench directory)
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from ..exceptions import ConfigError
from ..metrics import read_jsonl

#: the settings of :class:`~lmstream_kit.bench.BenchConfig` a resumed bench must share with the one
#: it resumes: each changes what a cell (and a probe) measures
RESUME_KEYS = ("duration_s", "speedup", "spread", "seed", "trigger_s", "master", "output", "read",
               "spark_conf", "device_mode", "optimizer", "feed", "kafka_partitions", "tumbling_target",
               "catch_up", "service_model", "controller", "state_store")
#: what a :data:`RESUME_KEYS` setting was in a bench whose settings file predates it
RESUME_KEYS_BEFORE = {"state_store": "default"}
#: the settings only the capacity search's probes depend on: a resume that changes one keeps the
#: cells and starts the search over (:func:`probes_stale`)
PROBE_KEYS = ("capacity_duration_s", "capacity_start", "capacity_max_rate", "capacity_min_batches")
#: what a probe setting was in a bench whose settings file predates it
PROBE_KEYS_BEFORE = {"capacity_min_batches": 0}
#: the lmstream controller's parameters whose default changed, as the benches ran them whose
#: settings file records no ``controller_defaults`` (it was written before the change)
CONTROLLER_DEFAULTS_BEFORE = {"cold_start": 0, "heap_admit": False, "cold_evictions": 0, "evict_horizon": False,
                              "cold_fraction": 1.0}
#: the bench directory's file with the settings it was started with (written when it starts)
CONFIG_FILE = "bench-config.json"
#: the logs of finished cells and capacity probes, appended as each finishes
CELLS_LOG = "cells.jsonl"
PROBES_LOG = "capacity.jsonl"


def cell_key(cell: Mapping[str, Any]) -> tuple:
    """What identifies a cell of a sweep: query, policy, traffic, repetition, offered rate and load.

    >>> cell_key({"query": "LR2S", "policy": "fixed", "traffic": "constant", "rep": 0, "rate": 2000,
    ...           "load": "overload"})
    ('LR2S', 'fixed', 'constant', 0, 2000.0, 'overload')
    """
    return (str(cell["query"]), str(cell["policy"]), str(cell["traffic"]), int(cell["rep"]),
            float(cell["rate"]), str(cell.get("load") or "sweep"))


def group_key(cell: Mapping[str, Any]) -> tuple:
    """The cells a bench compares side by side: :func:`cell_key` without the policy.

    >>> group_key({"query": "LR2S", "policy": "fixed", "traffic": "constant", "rep": 0, "rate": 2000})
    ('LR2S', 'constant', 0, 2000.0, 'sweep')
    """
    query, _, *rest = cell_key(cell)
    return (query, *rest)


def side_by_side(cells: list[Mapping[str, Any]], kept: Mapping[tuple, dict],
                 remeasure: Collection[str] = ()) -> tuple[dict, list[str]]:
    """The ``kept`` cells a resumed bench may keep, and the groups it runs again (labels, in order).

    A group (:func:`group_key`) is kept only where every one of its ``cells`` was kept: where one
    of them runs again (it failed, its run directory is gone, or its policy is new to the sweep),
    the others run again beside it, so that their numbers stay comparable.  Every group of a query
    in ``remeasure`` runs again too.

    >>> cells = [{"query": "LR1S", "policy": p, "traffic": t, "rep": 0, "rate": 1000.0}
    ...          for t in ("constant", "random") for p in ("lmstream", "asap")]
    >>> kept = {cell_key(c): dict(c) for c in cells[1:]}          # lmstream/constant failed
    >>> keep, again = side_by_side(cells, kept)
    >>> sorted(k[1:3] for k in keep), again
    ([('asap', 'random'), ('lmstream', 'random')], ['LR1S constant r0 at 1000'])
    >>> side_by_side(cells, {cell_key(c): dict(c) for c in cells}, remeasure={"LR1S"})[1]
    ['LR1S constant r0 at 1000', 'LR1S random r0 at 1000']
    """
    groups: dict[tuple, list[tuple]] = {}
    for cell in cells:
        groups.setdefault(group_key(cell), []).append(cell_key(cell))
    keep, again = dict(kept), []
    for group, keys in groups.items():
        if group[0] in remeasure or not all(k in kept for k in keys):
            if any(k in kept for k in keys):
                query, traffic, rep, rate, load = group
                again.append(f"{query} {traffic} r{rep} at {rate:g}" + ("" if load == "sweep" else f" ({load})"))
            for k in keys:
                keep.pop(k, None)
    return keep, again


def start(out: Path, config: Mapping[str, Any], started_at: str, commit: str | None = None) -> dict:
    """A fresh bench in ``out``: the logs of an older bench there are removed, the settings written
    (with the kit's source ``commit``, where known)."""
    out = Path(out)
    for name in (CELLS_LOG, PROBES_LOG):
        (out / name).unlink(missing_ok=True)
    return _write(out, {"config": dict(config), "controller_defaults": controller_defaults(), "started_at": started_at,
                        "resumed_at": [], "commits": [commit]})


def controller_defaults() -> dict:
    """Today's defaults of the controller parameters in :data:`CONTROLLER_DEFAULTS_BEFORE`.

    >>> controller_defaults()
    {'cold_start': 3, 'heap_admit': False, 'cold_evictions': 2, 'evict_horizon': True, 'cold_fraction': 0.5}
    """
    import inspect

    from ..controller import STREAM_COLD_FRACTION, AdmissionController

    params = inspect.signature(AdmissionController).parameters
    streams = {"cold_fraction": STREAM_COLD_FRACTION}  # what a LiveStream gives its controller
    return {key: streams.get(key, params[key].default) for key in CONTROLLER_DEFAULTS_BEFORE}


def effective_controller(saved: Mapping[str, Any] | None, controller: Mapping[str, Any] | None) -> dict:
    """The controller parameters a bench ran with: its ``controller`` settings over the defaults of
    its time (``saved["controller_defaults"]``; :data:`CONTROLLER_DEFAULTS_BEFORE` where the settings
    file predates them; today's where ``saved`` is None).

    >>> effective_controller({}, {"quantile": 0.97})
    {'cold_start': 0, 'heap_admit': False, 'cold_evictions': 0, 'evict_horizon': False, 'cold_fraction': 1.0, 'quantile': 0.97}
    >>> effective_controller(None, {"cold_start": 1})
    {'cold_start': 1, 'heap_admit': False, 'cold_evictions': 2, 'evict_horizon': True, 'cold_fraction': 0.5}
    """
    if saved is None:
        defaults = controller_defaults()
    else:  # a default that changed after the file was written reads as it was before the change
        defaults = {**CONTROLLER_DEFAULTS_BEFORE, **(saved.get("controller_defaults") or {})}
    return {**defaults, **dict(controller or {})}


def check(out: Path, config: Mapping[str, Any]) -> dict | None:
    """The settings file of the bench in ``out`` (None: it has none, from before this file was written);
    a ConfigError where ``config`` differs from it in one of :data:`RESUME_KEYS`."""
    path = Path(out) / CONFIG_FILE
    if not path.exists():
        return None
    try:
        saved = json.loads(path.read_text())
        before = saved["config"]
    except (ValueError, KeyError, TypeError):
        raise ConfigError(f"cannot resume the bench in {out}: {path.name} is not a bench's settings file") from None
    before = {**RESUME_KEYS_BEFORE, **before}
    for key in RESUME_KEYS:
        if key not in before or key not in config:
            continue
        was, now = before[key], config[key]
        if key == "controller":  # with the defaults of each one's time: a changed default changes what it measures
            was, now = effective_controller(saved, was), effective_controller(None, now)
        if not _same(was, now):
            raise ConfigError(f"cannot resume the bench in {out}: its {key} was {was!r}, this command gives "
                              f"{now!r} (give the same options, or start a new bench directory)")
    return saved


def probes_stale(saved: dict | None, config: Mapping[str, Any]) -> str | None:
    """Why the logged capacity probes no longer count for ``config`` (a :data:`PROBE_KEYS` setting
    changed, named with both values), or None.

    >>> probes_stale({"config": {"capacity_duration_s": 40.0}}, {"capacity_duration_s": 120.0})
    'its capacity_duration_s was 40.0, this command gives 120.0'
    >>> probes_stale({"config": {"capacity_duration_s": 40.0}}, {"capacity_duration_s": 40}) is None
    True

    A bench from before a setting existed measured as its old value did:

    >>> probes_stale({"config": {"capacity_duration_s": 40.0}}, {"capacity_min_batches": 20})
    'its capacity_min_batches was 0, this command gives 20'
    """
    before = (saved or {}).get("config") or {}
    if before:
        before = {**PROBE_KEYS_BEFORE, **before}
    for key in PROBE_KEYS:
        if key in before and key in config and not _same(before[key], config[key]):
            return f"its {key} was {before[key]!r}, this command gives {config[key]!r}"
    return None


def discard_probes(out: Path, stamp: str) -> Path | None:
    """Set the logged probes aside (``capacity-discarded-<stamp>.jsonl``): the search starts over."""
    log = Path(out) / PROBES_LOG
    if not log.exists():
        return None
    kept = log.with_name(f"capacity-discarded-{stamp}.jsonl")
    log.rename(kept)
    return kept


def searched_elsewhere(probes: list[dict], kept: Mapping[tuple, dict], boot: str | None) -> dict:
    """``{query: why}``: the queries whose capacity search runs again on this machine (``boot``).

    A query's cells at a share of asap's capacity run on the machine that searched it (a VM of
    another speed would run them at a share of a capacity it does not have, an overload or an idle
    load).  So where those cells are not yet all ``kept`` and some of the query's logged ``probes``
    ran on another machine (another boot, or none recorded: before the kit recorded it), the query's
    search starts over here.  A query whose cells at capacity were measured keeps its search, and so
    does every query where this machine's boot is unknown (``boot`` None: not Linux).

    >>> probes = [{"query": "LR2S", "boot": "aa"}, {"query": "CM1S", "boot": "aa"}, {"query": "CM1S", "boot": "bb"},
    ...           {"query": "LR1S"}, {"query": "LR1T", "boot": "aa"}]
    >>> kept = {("LR2S", "asap", "constant", 0, 800.0, "capacity"): {}}
    >>> searched_elsewhere(probes, kept, "bb")
    {'CM1S': 'its capacity probes ran on machines aa, bb; this one is bb', 'LR1S': 'its capacity probes ran on a machine not recorded; this one is bb', 'LR1T': 'its capacity probes ran on machine aa; this one is bb'}
    >>> searched_elsewhere(probes, kept, None)
    {}
    """
    if boot is None:
        return {}
    measured = {key[0] for key in kept if key[5] == "capacity"}
    boots: dict[str, set] = {}
    for row in probes:
        boots.setdefault(str(row["query"]), set()).add(row.get("boot"))
    why = {}
    for query, seen in boots.items():
        if query in measured or seen == {boot}:
            continue
        named = sorted(b for b in seen if b)
        where = (f"machine{'s' if len(named) > 1 else ''} {', '.join(named)}" if named else "")
        if None in seen:
            where = f"{where} and a machine not recorded" if where else "a machine not recorded"
        why[query] = f"its capacity probes ran on {where}; this one is {boot}"
    return why


def set_aside(out: Path, probes: list[dict], queries: Mapping[str, str], stamp: str) -> list[dict]:
    """Move the logged probes of ``queries`` (``{query: why}``) from ``capacity.jsonl`` to
    ``capacity-discarded-<stamp>.jsonl``, each with its query's ``set_aside`` reason; returns them.
    ``probes``: the logged probes (:func:`finished_probes`, their journals' fields filled in)."""
    out = Path(out)
    aside = [{**row, "set_aside": queries[row["query"]]} for row in probes if row["query"] in queries]
    if not aside:
        return []
    with open(out / f"capacity-discarded-{stamp}.jsonl", "a", encoding="utf-8") as fh:
        fh.writelines(json.dumps(row, default=str) + "\n" for row in aside)
    log = out / PROBES_LOG
    lines = log.read_text(encoding="utf-8").splitlines(keepends=True) if log.exists() else []
    keep = []
    for line in lines:
        try:
            query = json.loads(line).get("query")
        except ValueError:
            query = None  # a line cut short by the interruption: as finished_probes, not a probe
        if query not in queries:
            keep.append(line)
    tmp = log.with_name(PROBES_LOG + ".tmp")
    tmp.write_text("".join(keep), encoding="utf-8")
    os.replace(tmp, log)
    return aside


def search_starts(rows: list[dict]) -> dict:
    """``{(query, policy): rate}``: where each pair's search set aside had its bracket (the last row's
    ``lo``, its highest passed rate; else its ``hi``, its lowest failed one), for the search that runs
    again to start there, and not from the sweep's start (its doubling and halving cost probes).

    >>> search_starts([{"query": "Q", "policy": "a", "lo": 1000.0, "hi": None},
    ...                {"query": "Q", "policy": "a", "lo": 2000.0, "hi": 4000.0},
    ...                {"query": "Q", "policy": "b", "lo": None, "hi": 500.0},
    ...                {"query": "Q", "policy": "c", "lo": float("nan"), "hi": None}])
    {('Q', 'a'): 2000.0, ('Q', 'b'): 500.0}
    """
    last: dict = {}
    for row in rows:
        last[(row["query"], row["policy"])] = row
    starts = {}
    for pair, row in last.items():
        for key in ("lo", "hi"):
            value = row.get(key)
            if isinstance(value, (int, float)) and math.isfinite(value) and value > 0:
                starts[pair] = float(value)
                break
    return starts


def resumed(out: Path, saved: dict | None, config: Mapping[str, Any], now: str, commit: str | None = None) -> dict:
    """Record that the bench in ``out`` goes on at ``now`` (from the kit's source ``commit``: a resumed
    bench may run newer code, and its report says which); returns its settings file's content."""
    saved = dict(saved) if saved is not None else {"config": dict(config), "started_at": None, "resumed_at": [],
                                                   "commits": [None]}
    saved["resumed_at"] = [*saved.get("resumed_at", []), now]
    saved["commits"] = [*saved.get("commits", []), commit]
    saved["config"] = dict(config)  # the same where it counts (check); the probes' and the shape's as given now
    saved["controller_defaults"] = controller_defaults()  # check: today's defaults with these settings ran as before
    return _write(Path(out), saved)


def note_remeasured(out: Path, groups: list[str]) -> list[str]:
    """Add ``groups`` (:func:`side_by_side`'s labels) to the groups the bench in ``out`` re-measured in
    any of its parts; returns them all, in order."""
    return _note(out, "remeasured", groups)


def note_searched_again(out: Path, why: Mapping[str, str], at: str) -> list[str]:
    """Add the queries :func:`searched_elsewhere` sent back to the search (``{query: why}``), in the
    part that began ``at``, to those of the bench in ``out``'s parts; returns them all, in order."""
    return _note(out, "searched_again", [f"{query} (the part of {at}): {reason}" for query, reason in why.items()])


def _note(out: Path, key: str, items: list[str]) -> list[str]:
    """Append ``items`` to the list ``key`` of the settings file in ``out`` (kept across the bench's
    parts); returns the whole list."""
    path = Path(out) / CONFIG_FILE
    saved = json.loads(path.read_text()) if path.exists() else {}
    saved[key] = [*saved.get(key, []), *items]
    if items:
        _write(Path(out), saved)
    return saved[key]


def finished_cells(out: Path) -> dict:
    """``{cell_key: row}`` of the cells ``out/cells.jsonl`` logged as finished without failing, whose run
    directory is still there (the last row of a cell wins)."""
    out = Path(out)
    done: dict = {}
    for row in read_jsonl(out / CELLS_LOG):
        key = cell_key(row)
        if row.get("failed") or not row.get("run_dir") or not (out / row["run_dir"]).is_dir():
            done.pop(key, None)
        else:
            done[key] = row
    return done


def finished_probes(out: Path) -> list[dict]:
    """The capacity probes ``out/capacity.jsonl`` logged, in the order they ran."""
    return [row for row in read_jsonl(Path(out) / PROBES_LOG)
            if isinstance(row.get("rate"), (int, float)) and not math.isnan(row["rate"])]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return float(a) == float(b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _write(out: Path, content: dict) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / (CONFIG_FILE + ".tmp")
    tmp.write_text(json.dumps(content, indent=1, default=str) + "\n")
    os.replace(tmp, out / CONFIG_FILE)
    return content
