"""The reconfiguration journal: transactions, their order, a torn line, recovery decisions (no Spark)."""

from __future__ import annotations

import pytest

from lmstream_kit.exceptions import ConfigError
from lmstream_kit.journal import JOURNAL_FILE, Journal, recovery_plan


def test_a_transaction_goes_requested_prepared_applied_committed(tmp_path):
    j = Journal(tmp_path)
    t = j.begin("window_slide_s", old=10.0, value=5.0)
    t.step("prepared")
    t.step("applied")
    t.step("committed", batch_id=12)
    [row] = j.transactions()
    assert (row["txn"], row["op"], row["state"], row["old"], row["value"], row["batch_id"]) == (
        1, "window_slide_s", "committed", 10.0, 5.0, 12)
    assert row["requested_at"] <= row["prepared_at"] <= row["applied_at"] <= row["committed_at"]
    assert j.open() == []


@pytest.mark.parametrize(("path", "bad"), [(("prepared", "prepared"), "prepared to prepared"),
                                           (("applied",), "requested to applied"),
                                           (("prepared", "applied", "committed", "aborted"), "committed to aborted")])
def test_steps_out_of_order_are_refused(tmp_path, path, bad):
    t = Journal(tmp_path).begin("policy", old="lmstream", value="fixed")
    with pytest.raises(ConfigError, match=bad):
        for state in path:
            t.step(state)


def test_numbering_goes_on_across_restarts_and_a_torn_line_is_skipped(tmp_path):
    j = Journal(tmp_path)
    j.begin("restart", old=0, value=1).abort("refused")
    j.close()
    with open(tmp_path / JOURNAL_FILE, "a") as fh:
        fh.write('{"txn": 9, "op": "restart", "sta')  # a crash mid-line
    again = Journal(tmp_path)
    t = again.begin("state_partitions", old=2, value=4)
    assert t.txn == 2
    # the writer ends the torn line first: 2's request is not glued to it, and is kept
    assert [(r["txn"], r["state"]) for r in again.transactions()] == [(1, "aborted"), (2, "requested")]


def test_resolve_ends_the_open_transactions_and_says_recovered(tmp_path):
    j = Journal(tmp_path)
    a = j.begin("state_partitions", old=2, value=4)
    a.step("prepared")
    b = j.begin("window_slide_s", old=10.0, value=5.0)
    b.step("prepared")
    b.step("applied")
    j.resolve(recovery_plan(j.open(), state_partitions=4, rolled_back=None))
    rows = {r["txn"]: r for r in j.transactions()}
    assert rows[1]["state"] == "committed" and rows[1]["recovered"] is True
    assert rows[2]["state"] == "aborted" and "resumes with the configuration it is started with" in rows[2]["reason"]
    assert j.open() == []
    with pytest.raises(ConfigError, match="committed or aborted, got 'applied'"):
        j.begin("restart", old=0, value=1)
        j.resolve({3: ("applied", "no")})


def test_a_state_repartition_left_open_is_decided_by_the_checkpoint():
    txn = [{"txn": 1, "op": "state_partitions", "old": 2, "value": 4, "state": "requested"}]
    assert recovery_plan(txn, state_partitions=2, rolled_back=None)[1] == (
        "aborted", "the run stopped before the repartition into 4 partitions: the state stays in 2")
    assert recovery_plan(txn, state_partitions=4, rolled_back=None)[1][0] == "committed"
    assert recovery_plan(txn, state_partitions=2, rolled_back={"batch": 7, "kept": 2})[1][1].startswith(
        "the run stopped during the repartition into 4 partitions: batch 7 rolled back")


def test_committed_gives_the_last_committed_value_of_each_op_in_commit_order(tmp_path):
    import time

    j = Journal(tmp_path)
    for op, value, end in [("policy", "asap", "committed"), ("window_slide_s", 5.0, "committed"),
                           ("target_s", 3.0, "aborted"), ("policy", "lmstream", "committed")]:
        txn = j.begin(op, old=None, value=value)
        txn.step("prepared")
        if end == "aborted":
            txn.abort("stopped")
        else:
            txn.step("applied")
            txn.step("committed", batch_id=1)
        time.sleep(0.01)
    last = j.committed()
    assert [(op, t["value"]) for op, t in last.items()] == [("window_slide_s", 5.0), ("policy", "lmstream")]
