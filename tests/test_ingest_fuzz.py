"""Hypothesis fuzz of the directory ingest with hostile files (no Spark).

Each example lands a few generated files (CSV, JSON Lines / JSON arrays, Parquet, random bytes)
in a fresh inbox and runs the real :class:`~lmstream_kit.feed.ingest.DirectoryIngest` over a
:class:`~lmstream_kit.feed.spool.Spool`.  The generator knows what each row should become, so the
properties are exact:

* ``scan_once`` never raises, and no reason is the reader's internal-error one;
* every well-formed row lands in the spool exactly once, in the dataset of its file, in file order;
* every bad row is in the dead-letter file at its line with a reason naming the column and the
  value (or the column-count / JSON problem), and a file that cannot be parsed at all has one
  whole-file entry with its reason;
* the report, the manifest (``rows_ok`` / ``rows_bad``) and the dead-letter file agree.

The runs are derandomised and kept small enough to run in seconds.  Derandomised means the same
examples for the same set of imported modules: Hypothesis also draws constants it finds in the
project's loaded modules, so running this file alone or beside others gives two (each repeatable)
sets of examples.  The ``test_every_defect_*`` tests cover every defect and variant whatever the
draws.
"""

from __future__ import annotations

import io
import itertools
import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lmstream_kit.feed.ingest import DirectoryIngest, IngestReport
from lmstream_kit.feed.parse import INTERNAL_ERROR
from lmstream_kit.feed.spool import Spool

SCHEMA = pa.schema([pa.field("id", pa.int32(), nullable=False), pa.field("speed", pa.int32(), nullable=False),
                    pa.field("name", pa.string())])
CHECKS = {"speed": (0, 100)}
COLS = ["id", "speed", "name"]
# No comma, quote or line break: a CSV cell is never quoted.  "é" makes latin-1 differ from UTF-8.
NAME_CHARS = "abcxyz é日-_#"
HUGE = 1_100_000  # characters: longer than pyarrow's 1 MiB CSV block
BIG = 3_000_000_000  # too large for int32

FUZZ = settings(max_examples=100, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# Defects a row can have; each builder maps the ones its format cannot express to another.
DEFECTS = ["ok", "ok", "ok", "ok_pad", "huge", "fast", "high", "low", "overflow", "missing", "frac",
           "id_overflow", "short", "long", "dupkey", "notobj", "badjson", "deep"]


@dataclass
class Expect:
    """What one landed file must become."""

    good: list = field(default_factory=list)  # (id, speed, name) of each row that must land, in order
    bad: list = field(default_factory=list)  # (line, reason, exact) of each dead-letter entry, by line
    whole: tuple | None = None  # (reason, exact, rows_bad or None) when the file is rejected whole
    unknown: bool = False  # random content: only the general properties are checked
    skipped: bool = False  # 0 bytes: never picked up


rows_st = st.lists(
    st.tuples(st.sampled_from(DEFECTS), st.integers(0, 100),
              st.one_of(st.none(), st.text(NAME_CHARS, min_size=1, max_size=6)), st.integers(0, 2)),
    max_size=8,
)


def _line(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1


def _name(name, defect):
    return "h" * HUGE if defect == "huge" else name


# -------------------------------------------------------------------------------------- CSV
@st.composite
def csv_specs(draw):
    return {
        "format": "csv",
        "rows": draw(rows_st),
        "order": draw(st.permutations(COLS)),
        "extra": draw(st.sampled_from([[], ["note"], ["note", "note"]])),  # a repeated extra column is fine
        "bom": draw(st.booleans()),
        "newline": draw(st.sampled_from(["\n", "\r\n"])),
        "variant": draw(st.sampled_from(["plain"] * 6 + ["truncated", "latin1", "utf16", "utf16le", "nul",
                                                         "missing_col", "dup_col", "bom_only", "empty"])),
        "cut": draw(st.floats(0, 1)),
    }


def build_csv(spec, ids):
    header = list(spec["order"]) + spec["extra"]
    variant = spec["variant"]
    if variant == "missing_col":
        header.remove("speed")
    elif variant == "dup_col":
        header.append("speed")
    nl = spec["newline"]
    lines, exp = [nl.join([",".join(header)])], Expect()
    line_no = 1
    for defect, speed, name, blanks in spec["rows"]:
        lines += [""] * blanks
        line_no += blanks + 1
        rid = next(ids)
        name = _name(name, defect)
        cells = {"id": str(rid), "speed": str(speed), "name": name or "", "note": "n"}
        reason = None
        if defect == "ok_pad":
            cells["speed"] = f" {speed} "
        elif defect == "fast":
            cells["speed"], reason = "fast", "column 'speed': value 'fast' is not int32"
        elif defect in ("high", "low"):
            v = 150 if defect == "high" else -7
            cells["speed"], reason = str(v), f"column 'speed': value {v} is outside [0, 100]"
        elif defect == "overflow":
            cells["speed"], reason = str(BIG), f"column 'speed': value '{BIG}' is not int32"
        elif defect == "missing":
            cells["speed"], reason = "", "column 'speed': value is empty"
        elif defect == "frac":
            cells["speed"], reason = "2.5", "column 'speed': value '2.5' is not int32"
        elif defect == "id_overflow":
            cells["id"], reason = str(BIG), f"column 'id': value '{BIG}' is not int32"
        text = ",".join(cells[c] for c in header)
        if defect == "short":
            text, reason = text.rsplit(",", 1)[0], f"expected {len(header)} columns, got {len(header) - 1}"
        elif defect == "long":
            text, reason = text + ",more", f"expected {len(header)} columns, got {len(header) + 1}"
        lines.append(text)
        if reason is None:
            exp.good.append((rid, speed, name))
        else:
            exp.bad.append((line_no, reason, True))
    if variant == "truncated" and spec["rows"]:
        # Cut the last row before its last comma (but keep a character): too few columns.
        last = lines[-1]
        k = 1 + int(spec["cut"] * (last.rindex(",") - 1))
        lines[-1] = last[:k]
        if exp.bad and exp.bad[-1][0] == line_no:
            exp.bad.pop()
        else:
            exp.good.pop()
        exp.bad.append((line_no, f"expected {len(header)} columns, got {lines[-1].count(',') + 1}", True))
        text = nl.join(lines)  # and no line break at the end
    else:
        text = nl.join(lines) + nl
    data = text.encode()
    n_rows = sum(1 for ln in lines[1:] if ln)  # a short row of a 2-column header can be empty

    if variant == "empty":
        return b"", Expect(skipped=True)
    if variant == "bom_only":
        return b"\xef\xbb\xbf", Expect(whole=("file has no header line", True, 1))
    if variant == "missing_col":
        return data, Expect(whole=("header lacks column(s) 'speed'", True, max(1, n_rows)))
    if variant == "dup_col":
        return data, Expect(whole=("header repeats column(s) 'speed'", True, max(1, n_rows)))
    if variant == "latin1":
        data = (text + f"{next(ids)},1,café{nl}").encode("latin-1", "replace")
        off = data.index(b"\xe9")
        reason = (f"file is not UTF-8 text (byte 0xe9 at offset {off}, line {_line(data, off)}): "
                  "not a CSV file, or one in another encoding")
        return data, Expect(whole=(reason, True, None))
    if variant == "utf16":
        return text.encode("utf-16"), Expect(whole=(
            "file is UTF-16 text (byte order mark ff fe), not UTF-8: save the CSV file as UTF-8", True, None))
    if variant == "utf16le":
        return text.encode("utf-16-le"), Expect(whole=(
            "file is not text (NUL byte at offset 1, line 1): not a CSV file", True, None))
    if variant == "nul":
        pos = int(spec["cut"] * len(text))
        data = (text[:pos] + "\x00" + text[pos:]).encode()
        off = len(text[:pos].encode())
        reason = f"file is not text (NUL byte at offset {off}, line {_line(data, off)}): not a CSV file"
        return data, Expect(whole=(reason, True, None))
    if spec["bom"]:
        data = b"\xef\xbb\xbf" + data
    return data, exp


# ------------------------------------------------------------------------------------- JSON
@st.composite
def json_specs(draw):
    return {
        "format": "json",
        "rows": draw(rows_st),
        "array": draw(st.booleans()),
        "extra": draw(st.sampled_from([None, "text", "nested"])),
        "bom": draw(st.booleans()),
        "newline": draw(st.sampled_from(["\n", "\r\n"])),
        "variant": draw(st.sampled_from(["plain"] * 6 + ["truncated", "latin1", "utf16", "empty"])),
        "cut": draw(st.floats(0, 1)),
    }


def _obj(pairs):
    # By hand, so that a key can be given twice.
    return "{" + ", ".join(f"{json.dumps(k)}: {v}" for k, v in pairs) + "}"


def build_json(spec, ids):
    array, variant = spec["array"], spec["variant"]
    texts, exp, line_no = [], Expect(), 0
    for index, (defect, speed, name, blanks) in enumerate(spec["rows"]):
        if array and defect in ("badjson", "deep"):
            defect = "ok"  # would break the whole array
        rid = next(ids)
        name = _name(name, defect)
        pairs = [("id", str(rid)), ("speed", str(speed)), ("name", json.dumps(name))]
        if spec["extra"] == "text":
            pairs.append(("note", '"n"'))
        elif spec["extra"] == "nested":
            pairs.append(("note", '{"a": [1, {"b": null}], "c": 1.5}'))
        reason = None
        if defect == "ok_pad":
            pairs[1] = ("speed", f"{speed}.0")  # an integral float reads as an integer
        elif defect == "fast":
            pairs[1], reason = ("speed", '"fast"'), "column 'speed': value 'fast' is not int32"
        elif defect in ("high", "low"):
            v = 150 if defect == "high" else -7
            pairs[1], reason = ("speed", str(v)), f"column 'speed': value {v} is outside [0, 100]"
        elif defect == "overflow":
            pairs[1], reason = ("speed", str(BIG)), f"column 'speed': value {BIG} is not int32"
        elif defect == "missing":
            del pairs[1]
            reason = "column 'speed': value is missing"
        elif defect == "frac":
            pairs[1], reason = ("speed", "2.5"), "column 'speed': value 2.5 is not int32"
        elif defect == "id_overflow":
            pairs[0], reason = ("id", str(BIG)), f"column 'id': value {BIG} is not int32"
        elif defect == "dupkey":
            pairs.append(("speed", "7"))
            reason = f"column 'speed': given 2 times ({speed}, 7)"
        text = _obj(pairs)
        if defect == "notobj":
            # A one-line file "[1, 2]" would be a JSON array of two non-objects.
            text = '"text"' if len(spec["rows"]) == 1 and not array else "[1, 2]"
            reason = "record is not a JSON object"
        elif defect == "badjson":
            text, reason = "{oops", ("invalid JSON: Expecting property name enclosed in double quotes: "
                                     "line 1 column 2 (char 1)")
        elif defect == "deep":
            text = _obj(pairs + [("nest", "[" * 5000 + "]" * 5000)])
            reason = ("invalid JSON: maximum recursion depth exceeded while decoding a JSON array "
                      "from a unicode string")
        if array:
            line_no = index
        else:
            texts += [""] * blanks
            line_no += blanks + 1
        texts.append(text)
        if reason is None:
            exp.good.append((rid, speed, name))
        else:
            exp.bad.append((line_no, reason, True))
    nl = spec["newline"]
    if array:
        text = "[" + ("," + nl).join(texts) + "]" + nl
    else:
        text = nl.join(texts) + nl
    if variant == "truncated" and spec["rows"]:
        if array:
            cut = text.rstrip()[:-1]  # no closing bracket
            return cut.encode(), Expect(whole=("invalid JSON array: ", False, 1))
        # Cut inside the last record (a proper prefix of an object or array is never valid JSON).
        last = texts[-1]
        k = 1 + int(spec["cut"] * (len(last) - 2))
        text = text[: len(text) - len(nl) - len(last) + k]
        if exp.bad and exp.bad[-1][0] == line_no:
            exp.bad.pop()
        else:
            exp.good.pop()
        exp.bad.append((line_no, "invalid JSON: ", False))
    if variant == "empty":
        return b"", Expect(skipped=True)
    if variant == "latin1":
        data = (text + _obj([("id", str(next(ids))), ("speed", "1"), ("name", '"café"')]) + nl).encode(
            "latin-1", "replace")
        off = data.index(b"\xe9")
        reason = (f"file is not UTF-8 text (byte 0xe9 at offset {off}, line {_line(data, off)}): "
                  "not a JSON file, or one in another encoding")
        return data, Expect(whole=(reason, True, None))
    if variant == "utf16":
        return text.encode("utf-16"), Expect(whole=(
            "file is UTF-16 text (byte order mark ff fe), not UTF-8: save the JSON file as UTF-8", True, None))
    data = text.encode()
    if spec["bom"]:
        data = b"\xef\xbb\xbf" + data
    return data, exp


# ---------------------------------------------------------------------------------- Parquet
@st.composite
def parquet_specs(draw):
    return {
        "format": "parquet",
        "rows": draw(rows_st),
        "speed_type": draw(st.sampled_from(["int32", "int64", "string", "float64"])),
        "id_type": draw(st.sampled_from(["int32", "int64"])),
        "dictionary": draw(st.booleans()),  # name column dictionary-encoded
        "extra": draw(st.booleans()),
        "variant": draw(st.sampled_from(["plain"] * 6 + ["truncated", "missing_col", "dup_col", "nested"])),
        "cut": draw(st.floats(0, 1)),
    }


def build_parquet(spec, ids):
    st_type, variant = spec["speed_type"], spec["variant"]
    id_vals, speed_vals, names, exp = [], [], [], Expect()
    for index, (defect, speed, name, _) in enumerate(spec["rows"]):
        rid = next(ids)
        name = _name(name, defect)
        value = {"string": str(speed), "float64": float(speed)}.get(st_type, speed)
        reason = None
        if defect == "ok_pad" and st_type == "string":
            value = f" {speed} "
        elif defect == "fast" and st_type == "string":
            value, reason = "fast", "column 'speed': value 'fast' is not int32"
        elif defect == "overflow" and st_type != "int32":
            value = {"string": str(BIG), "float64": float(BIG)}.get(st_type, BIG)
            reason = f"column 'speed': value {json.dumps(value) if st_type != 'string' else repr(value)} is not int32"
        elif defect == "frac" and st_type in ("string", "float64"):
            value = "2.5" if st_type == "string" else 2.5
            reason = f"column 'speed': value {value!r} is not int32"
        elif defect == "missing":
            value, reason = None, "column 'speed': value is missing"
        elif defect == "id_overflow" and spec["id_type"] == "int64":
            rid, reason = BIG, f"column 'id': value {BIG} is not int32"
        elif defect in ("high", "low", "fast", "overflow", "frac"):
            v = -7 if defect == "low" else 150
            value = {"string": str(v), "float64": float(v)}.get(st_type, v)
            reason = f"column 'speed': value {v} is outside [0, 100]"
        id_vals.append(rid)
        speed_vals.append(value)
        names.append(name)
        if reason is None:
            exp.good.append((rid, speed, name))
        else:
            exp.bad.append((index, reason, True))
    name_arr = pa.array(names, pa.string())
    if spec["dictionary"]:
        name_arr = name_arr.dictionary_encode()
    arrays = [pa.array(id_vals, getattr(pa, spec["id_type"])()),
              pa.array(speed_vals, getattr(pa, st_type)()), name_arr]
    names_ = ["id", "speed", "name"]
    if spec["extra"]:
        arrays.append(pa.array([[1, 2]] * len(id_vals)))  # an unused nested column is fine
        names_.append("note")
    n = len(id_vals)
    if variant == "missing_col":
        del arrays[1], names_[1]
        exp = Expect(whole=("file lacks column(s) 'speed'", True, max(1, n)))
    elif variant == "dup_col":
        arrays.append(arrays[1])
        names_.append("speed")
        exp = Expect(whole=("file has column(s) 'speed' more than once", True, max(1, n)))
    elif variant == "nested":
        arrays[1] = pa.array([[1]] * n, pa.list_(pa.int64()))
        exp = Expect(whole=(("cannot convert to the spool schema: column 'speed' is list<element: int64>, "
                             "which does not convert to int32"), True, max(1, n)))
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_arrays(arrays, names=names_), buf)
    data = buf.getvalue()
    if variant == "truncated":
        data = data[: int(spec["cut"] * (len(data) - 1))]
        exp = Expect(skipped=True) if not data else Expect(whole=("not a readable Parquet file: ", False, 1))
    return data, exp


# ------------------------------------------------------------------------------------- junk
@st.composite
def junk_specs(draw):
    return {
        "format": "junk",
        "ext": draw(st.sampled_from(["csv", "json", "jsonl", "parquet"])),
        "data": draw(st.one_of(st.binary(min_size=1, max_size=300),
                               st.text(max_size=200).map(str.encode),
                               st.text(max_size=100).map(lambda t: t.encode("utf-16")))),
    }


def build_junk(spec, ids):
    data = spec["data"]
    if not data:
        return data, Expect(skipped=True)
    if spec["ext"] == "parquet" and not data.endswith(b"PAR1"):
        return data, Expect(whole=("not a readable Parquet file: ", False, 1))
    return data, Expect(unknown=True)


BUILD = {"csv": build_csv, "json": build_json, "parquet": build_parquet, "junk": build_junk}
EXT = {"csv": "csv", "json": "jsonl", "parquet": "parquet"}


# ------------------------------------------------------------------------------- properties
def _dead_letters(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()] if path.exists() else []


def check_ingest(specs):
    ids = itertools.count(1000)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        inbox = root / "inbox"
        inbox.mkdir()
        files: dict[str, tuple[bytes, Expect]] = {}
        for k, spec in enumerate(specs):
            data, exp = BUILD[spec["format"]](spec, ids)
            ext = spec.get("ext") or EXT[spec["format"]]
            if spec["format"] == "json" and spec["array"]:
                ext = "json"
            name = f"f{k}.{ext}"
            (inbox / name).write_bytes(data)
            past = time.time() - 100 + k  # settled, in list order
            os.utime(inbox / name, (past, past))
            files[name] = (data, exp)
        spool = Spool(root / "spool", schema=SCHEMA, durable=False)
        ing = DirectoryIngest(inbox, spool, checks=CHECKS, dead_letter=root / "dead.jsonl")

        report = ing.scan_once()  # must not raise

        skipped = [n for n, (_, e) in files.items() if e.skipped]
        handled = [n for n in files if n not in skipped]
        assert (report.files, report.deferred) == (len(handled), len(skipped))
        manifest = {e["file"]: e for e in ing.manifest()}
        assert sorted(manifest) == sorted(handled)
        dead = _dead_letters(ing.dead_letter)
        for d in dead:
            assert d["reason"] and "\n" not in d["reason"], d
            assert not d["reason"].startswith(INTERNAL_ERROR), d
        by_file = {n: [d for d in dead if d["file"] == n] for n in files}
        datasets = {info.source: info for info in spool.datasets()}

        for name, (_, exp) in files.items():
            entries = by_file[name]
            if exp.skipped:
                assert not entries and name not in datasets
                continue
            m = manifest[name]
            landed = []
            if name in datasets:
                info = datasets[name]
                t = spool.read_table(info.seq, info.seq + 1)
                landed = list(zip(*(t.column(c).to_pylist() for c in COLS)))
                assert m["seq"] == info.seq and len(landed) == info.rows
            assert m["rows_ok"] == len(landed), (name, m)
            # A file rejected whole has one entry (and counts the rows it seems to hold, >= 1);
            # otherwise each rejected row has its own entry.
            rejected_whole = len(entries) == 1 and not landed and m["rows_bad"] >= 1
            assert rejected_whole or m["rows_bad"] == len(entries), (name, m, entries)
            if exp.unknown:
                assert not landed, (name, landed)
                continue
            if exp.whole is not None:
                reason, exact, rows_bad = exp.whole
                assert rejected_whole, (name, m, entries)
                got = entries[0]["reason"]
                assert got == reason if exact else got.startswith(reason), (name, got, reason)
                if rows_bad is not None:
                    assert m["rows_bad"] == rows_bad, (name, m)
                continue
            assert m["rows_bad"] == len(entries), (name, m, entries)
            # Every well-formed row exactly once, in file order; every bad row at its line.
            assert landed == exp.good, name
            got = [(d["line"], d["reason"]) for d in entries]
            assert len(got) == len(exp.bad), (name, got, exp.bad)
            for (line, reason), (e_line, e_reason, exact) in zip(got, exp.bad):
                assert line == e_line, (name, got, exp.bad)
                assert reason == e_reason if exact else reason.startswith(e_reason), (name, reason, e_reason)
            assert m["rows_ok"] + m["rows_bad"] == len(exp.good) + len(exp.bad)

        assert report.rows_ok == sum(m["rows_ok"] for m in manifest.values()) == spool.total_rows()
        assert report.rows_bad == sum(m["rows_bad"] for m in manifest.values())
        assert report.datasets == len(datasets)
        # Exactly once: a second scan finds nothing new.
        assert ing.scan_once() == IngestReport(deferred=len(skipped))


any_file = st.one_of(csv_specs(), json_specs(), parquet_specs(), junk_specs())


@FUZZ
@given(st.lists(csv_specs(), min_size=1, max_size=3))
def test_fuzz_csv_files(specs):
    check_ingest(specs)


@FUZZ
@given(st.lists(json_specs(), min_size=1, max_size=3))
def test_fuzz_json_files(specs):
    check_ingest(specs)


@FUZZ
@given(st.lists(parquet_specs(), min_size=1, max_size=3))
def test_fuzz_parquet_files(specs):
    check_ingest(specs)


@FUZZ
@given(st.lists(any_file, min_size=1, max_size=4))
def test_fuzz_mixed_and_random_files(specs):
    check_ingest(specs)


# Every defect in every variant of every format once, whatever the draws above happen to cover.
ALL_ROWS = [(d, 10 + k, None if k % 4 == 0 else f"n{k}é", k % 2) for k, d in enumerate(DEFECTS)]
CSV_VARIANTS = ["plain", "truncated", "latin1", "utf16", "utf16le", "nul", "missing_col", "dup_col",
                "bom_only", "empty"]


def test_every_defect_in_every_csv_variant():
    specs = [{"format": "csv", "rows": ALL_ROWS, "order": ["speed", "name", "id"], "extra": ["note", "note"],
              "bom": k % 2 == 0, "newline": "\r\n" if k % 3 else "\n", "variant": v, "cut": 0.6}
             for k, v in enumerate(CSV_VARIANTS)]
    check_ingest(specs)


def test_every_defect_in_every_json_variant():
    specs = [{"format": "json", "rows": ALL_ROWS, "array": array, "extra": extra, "bom": array,
              "newline": "\r\n" if array else "\n", "variant": v, "cut": 0.3}
             for v in ["plain", "truncated", "latin1", "utf16", "empty"]
             for array, extra in [(False, "nested"), (True, "text")]]
    check_ingest(specs)


def test_every_defect_in_every_parquet_type_and_variant():
    specs = [{"format": "parquet", "rows": ALL_ROWS, "speed_type": t, "id_type": i, "dictionary": i == "int64",
              "extra": t == "string", "variant": "plain", "cut": 0.5}
             for t in ["int32", "int64", "string", "float64"] for i in ["int32", "int64"]]
    specs += [{"format": "parquet", "rows": ALL_ROWS, "speed_type": "string", "id_type": "int64",
               "dictionary": True, "extra": True, "variant": v, "cut": 0.5}
              for v in ["truncated", "missing_col", "dup_col", "nested"]]
    check_ingest(specs)
