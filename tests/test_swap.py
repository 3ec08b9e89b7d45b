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
