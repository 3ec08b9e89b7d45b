"""A metrics.jsonl torn by a crash (issue 16, item 5): what a driver killed mid-line leaves never
breaks ``load_metrics``, ``lmstream-kit compare`` or the dashboard's replay; a line that is corrupt
for another reason is one error naming the file and the line.  No Spark.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from lmstream_kit.cli import main
from lmstream_kit.exceptions import ConfigError, KitError
from lmstream_kit.metrics import CorruptLineError, JsonlWriter, load_metrics, read_jsonl, write_run_info
from widgets.sources import RecordBuffer, load_run


def record(batch_id: int, rows: int = 100) -> dict:
    """A realistic metrics record: nested plan, a changes list, a null and a non-finite float."""
    return {"batch_id": batch_id, "policy": "lmstream", "rows": rows, "bytes": rows * 77,
            "max_latency_s": 1.0 + batch_id / 10, "avg_latency_s": 0.5 + batch_id / 10, "processing_s": 0.4,
            "throughput_rows_s": rows / 0.4, "bound_s": 2.5, "within_bound": True, "target_s": math.nan,
            "start_seq": batch_id, "end_seq": batch_id + 1, "decision_reason": "bound \u2192 \"admit\"",
            "device_plan": {"entries": [{"id": 1, "exec": "Project", "device": "CPU", "children": []}],
                            "inflection_point": 153600.0},
            "changes": [{"param": "slide_s", "old": 10.0, "value": 5.0, "at": 1.7e9}], "estimate_s": None}


def write_run(run: Path, records: list[dict], tail: str = "") -> Path:
    """A run directory whose metrics.jsonl holds ``records`` (as the kit writes them), then ``tail``."""
    run.mkdir(parents=True, exist_ok=True)
    write_run_info(run, {"workload": "PASSTHROUGH", "policy": "lmstream"})
    writer = JsonlWriter(run / "metrics.jsonl")
    for r in records:
        writer.append(r)
    writer.close()
    with open(run / "metrics.jsonl", "a", encoding="utf-8") as fh:
        fh.write(tail)
    return run


def line_of(r: dict) -> str:
    return json.dumps({k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in r.items()})


def invoke(*args) -> tuple[int, str, str]:
    """``lmstream-kit ARGS`` through the CLI's entry point: (exit status, stdout, stderr)."""
    with CliRunner().isolation() as (stdout, stderr, _):
        code = main([str(a) for a in args])
    return code, stdout.getvalue().decode(), stderr.getvalue().decode()


RECORDS = [record(b) for b in range(4)]


# --------------------------------------------------------------------------- a torn last line


def test_a_last_line_cut_anywhere_is_skipped_by_every_reader(tmp_path):
    run = write_run(tmp_path / "run", RECORDS)
    path, written = run / "metrics.jsonl", (run / "metrics.jsonl").read_text()
    whole = line_of(record(4)) + "\n"
    # every cut of the line (no newline yet), down to the line whole but for its newline
    for cut in range(1, len(whole)):
        path.write_text(written + whole[:cut])
        got = [r["batch_id"] for r in read_jsonl(path)]
        assert got == [0, 1, 2, 3] + ([4] if cut == len(whole) - 1 else []), cut
    path.write_text(written + whole[:len(whole) // 2])
    assert list(load_metrics(run)["batch_id"]) == [0, 1, 2, 3]
    buffer = RecordBuffer()
    assert load_run(run, buffer)["workload"] == "PASSTHROUGH"
    assert buffer.batch_ids() == [0, 1, 2, 3]


def test_a_multibyte_character_cut_in_two_on_the_last_line_is_skipped(tmp_path):
    line = json.dumps({"batch_id": 9, "reason": "caf\u00e9 \u2192 ok"}, ensure_ascii=False).encode("utf-8")
    cut = line.index("\u2192".encode("utf-8")) + 1  # inside the arrow's three bytes
    run = write_run(tmp_path / "run", RECORDS)
    with open(run / "metrics.jsonl", "ab") as fh:
        fh.write(line[:cut])
    assert [r["batch_id"] for r in read_jsonl(run / "metrics.jsonl")] == [0, 1, 2, 3]
    assert len(load_metrics(run)) == 4


def test_the_torn_last_line_of_spark_progress_is_skipped_too(tmp_path):
    run = write_run(tmp_path / "run", RECORDS[:2])
    (run / "spark_progress.jsonl").write_text(json.dumps({"batch_id": 0, "addBatch_ms": 40}) + "\n"
                                              + json.dumps({"batch_id": 1, "addBatch_ms": 50}) + "\n"
                                              + '{"batch_id": 2, "addBa')
    df = load_metrics(run)
    assert list(df["batch_id"]) == [0, 1] and list(df["spark_addBatch_ms"]) == [40, 50]


def test_compare_and_replay_read_a_run_whose_last_line_is_torn(tmp_path):
    run = write_run(tmp_path / "run", RECORDS, line_of(record(4))[:37])
    code, out, err = invoke("compare", run)
    assert code == 0, (out, err)
    assert "Traceback" not in out + err
    row = next(line for line in out.splitlines() if str(run) in line)
    assert " 4 " in row and "400" in row  # 4 batches, 400 rows: the torn fifth is not counted
    buffer = RecordBuffer()
    load_run(run, buffer)
    assert [r["batch_id"] for r in buffer.records()] == [0, 1, 2, 3]


def test_dashboard_replays_a_run_whose_last_line_is_torn(tmp_path):
    D = pytest.importorskip("widgets.dashboard")
    run = write_run(tmp_path / "run", RECORDS, line_of(record(4))[:50])
    dash = D.Dashboard(run)
    try:
        assert dash.mode == "replay"
        assert dash._buffer.batch_ids() == [0, 1, 2, 3]
    finally:
        dash.close()


# --------------------------------------------------------------------------- torn lines in the middle


def test_a_run_restarted_after_a_crash_ends_the_torn_line_and_loses_no_record(tmp_path):
    # what a restarted run does: the crash left half a line, the next run's writer appends to the file
    run = write_run(tmp_path / "run", RECORDS[:3], line_of(record(3))[:41])
    writer = JsonlWriter(run / "metrics.jsonl")
    for r in (record(3), record(4)):
        writer.append(r)
    writer.close()
    lines = (run / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 6 and lines[3] == line_of(record(3))[:41]  # the torn line stands alone
    assert [r["batch_id"] for r in read_jsonl(run / "metrics.jsonl")] == [0, 1, 2, 3, 4]
    assert list(load_metrics(run)["batch_id"]) == [0, 1, 2, 3, 4]
    code, out, err = invoke("compare", run)
    assert code == 0 and "Traceback" not in out + err, (out, err)
    # a second crash, the same way: still every record once
    with open(run / "metrics.jsonl", "a") as fh:
        fh.write(line_of(record(5))[:12])
    JsonlWriter(run / "metrics.jsonl").append(record(5))
    assert [r["batch_id"] for r in read_jsonl(run / "metrics.jsonl")] == [0, 1, 2, 3, 4, 5]


def test_a_record_glued_to_a_torn_line_is_kept(tmp_path):
    # an older writer appended without ending the torn line: the record after it is whole
    whole = line_of(record(3))
    for cut in (1, 2, 15, 40, len(whole) // 2, len(whole) - 1):
        run = write_run(tmp_path / f"g{cut}", RECORDS[:3], whole[:cut] + whole + "\n" + line_of(record(4)) + "\n")
        assert [r["batch_id"] for r in read_jsonl(run / "metrics.jsonl")] == [0, 1, 2, 3, 4], cut


def test_torn_lines_of_the_journal_are_skipped_by_the_same_rules(tmp_path):
    from lmstream_kit.journal import Journal

    (tmp_path / "reconfig.jsonl").write_text('{"txn": 1, "op": "restart", "state": "requested"}\n{"txn": 1, "op"')
    journal = Journal(tmp_path)
    assert [e["state"] for e in journal.entries()] == ["requested"]


def test_blank_lines_are_skipped(tmp_path):
    run = write_run(tmp_path / "run", RECORDS[:2], "\n  \n" + line_of(record(2)) + "\n\n")
    assert [r["batch_id"] for r in read_jsonl(run / "metrics.jsonl")] == [0, 1, 2]


# --------------------------------------------------------------------------- corrupt lines


@pytest.mark.parametrize("bad", ['{"batch_id": 2,, "rows": 1}', "garbage", '{"batch_id": 2}}', "[1, 2]]",
                                 '{"batch_id": 2, "rows": 1} {"x"'])
def test_a_corrupt_line_in_the_middle_is_one_error_naming_the_file_and_line(tmp_path, bad):
    run = write_run(tmp_path / "run", RECORDS[:2], bad + "\n" + line_of(record(3)) + "\n")
    path = run / "metrics.jsonl"
    with pytest.raises(CorruptLineError) as info:
        read_jsonl(path)
    message = str(info.value)
    assert isinstance(info.value, ConfigError) and isinstance(info.value, KitError)
    assert message.startswith(f"{path}, line 3: not a JSON record (") and "\n" not in message, message
    with pytest.raises(CorruptLineError, match="line 3"):
        load_metrics(run)
    with pytest.raises(ConfigError, match="line 3"):
        load_run(run, RecordBuffer())
    code, out, err = invoke("compare", run)
    assert code == 2 and out == "", (out, err)
    assert err.splitlines() == [f"error: {message}"]


def test_a_line_that_is_not_utf8_in_the_middle_is_an_error(tmp_path):
    run = write_run(tmp_path / "run", RECORDS[:2])
    with open(run / "metrics.jsonl", "ab") as fh:
        fh.write(b'{"batch_id": 2, "x": "\xff\xfe"}\n' + line_of(record(3)).encode() + b"\n")
    with pytest.raises(CorruptLineError, match=r"metrics.jsonl, line 3: not UTF-8 \(invalid start byte at byte 22\)"):
        read_jsonl(run / "metrics.jsonl")


def test_a_corrupt_last_line_with_its_newline_is_an_error_without_it_skipped(tmp_path):
    run = write_run(tmp_path / "a", RECORDS[:2], "not json\n")
    with pytest.raises(CorruptLineError, match="line 3"):
        read_jsonl(run / "metrics.jsonl")
    run = write_run(tmp_path / "b", RECORDS[:2], "not json")  # no newline: the writer died in it
    assert len(read_jsonl(run / "metrics.jsonl")) == 2
