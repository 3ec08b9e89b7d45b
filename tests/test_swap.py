"""The per-batch function swap on plain objects: the boundary it takes effect at, and its transaction."""

from __future__ import annotations

from types import SimpleNamespace

from lmstream_kit.journal import Journal
from lmstream_kit.protocol import ChangeLog
from lmstream_kit.swap import BatchFunction


def swap_with_log(**kw) -> BatchFunction:
    swap = BatchFunction(**kw)
    swap.bind_changelog(ChangeLog())
    return swap


def test_the_swap_runs_from_the_next_batch_and_commits_when_it_completed(tmp_path):
    journal = Journal(tmp_path)
    swap = swap_with_log(base=lambda rows: sorted(rows))
    txn = journal.begin("batch_function", old="none", value="double")
    txn.step("prepared")
    swap.request(lambda rows: [2 * r for r in rows], "double", txn)
    assert swap.finish([3, 1]) == [1, 3]  # the batch running now keeps the old function (after the base)
    swap.before_batch(SimpleNamespace(batch_id=5))
    assert swap.finish([3, 1]) == [2, 6] and txn.state == "applied"
    assert swap.after_batch(SimpleNamespace(batch_id=5)) == {"batch_function": "double"}
    [row] = journal.transactions()
    assert (row["state"], row["batch_id"]) == ("committed", 5)
    assert [(c.param, c.old, c.value) for c in swap.changelog.take()] == [("batch.function", "none", "double")]


def test_a_second_request_before_a_batch_replaces_the_first_which_aborts(tmp_path):
    journal = Journal(tmp_path)
    swap = swap_with_log()
    first = journal.begin("batch_function", old="none", value="a")
    first.step("prepared")
    swap.request(lambda rows: rows + ["a"], "a", first)
    second = journal.begin("batch_function", old="none", value="b")
    second.step("prepared")
    swap.request(lambda rows: rows + ["b"], "b", second)
    swap.before_batch(SimpleNamespace(batch_id=1))
    assert swap.finish([]) == ["b"]
    states = {t["value"]: (t["state"], t.get("reason")) for t in journal.transactions()}
    assert states["a"] == ("aborted", "replaced by 'b' before a batch ran under it")
    assert states["b"][0] == "applied"


def test_a_function_that_fails_on_its_first_batch_is_undone_and_aborted(tmp_path):
    journal = Journal(tmp_path)
    swap = swap_with_log()
    swap.request(lambda rows: rows + ["v1"], "v1")
    swap.before_batch(SimpleNamespace(batch_id=1))
    swap.after_batch(SimpleNamespace(batch_id=1))
    txn = journal.begin("batch_function", old="v1", value="v2")
    txn.step("prepared")
    swap.request(lambda rows: rows + ["v2"], "v2", txn)
    swap.before_batch(SimpleNamespace(batch_id=2))
    assert swap.on_batch_failed(SimpleNamespace(batch_id=2), ValueError("bad speed -3\n  at row 7")) is True
    assert swap.finish([]) == ["v1"] and swap.name == "v1"  # the batch runs again under v1
    row = journal.transactions()[-1]
    assert row["state"] == "aborted" and row["batch_id"] == 2
    assert row["reason"] == "batch function 'v2' failed on batch 2, which ran again under 'v1': ValueError: bad speed -3"
    assert swap.after_batch(SimpleNamespace(batch_id=2)) == {"batch_function": "v1"}
    assert journal.transactions()[-1]["state"] == "aborted"  # not committed after the rerun
    # a batch that fails with no swap at its start is not the swap's to undo
    assert swap.on_batch_failed(SimpleNamespace(batch_id=3), ValueError("x")) is False
