"""A change of the source's input partitions is a journal transaction: asked, applied with the
first batch admitted after it, committed when that batch completed (lmstream_kit.tune.knobs)."""

from __future__ import annotations

from types import SimpleNamespace

from lmstream_kit.journal import Journal, recovery_plan
from lmstream_kit.tune.knobs import InputPartitions


def batch(knob, batch_id):
    """One batch as the run loop drives it: admitted, planned, run, completed."""
    knob.on_admit([])
    planned = knob.on_plan(0, 10)["partitions"]
    knob.before_batch(SimpleNamespace(batch_id=batch_id, admission={}))
    knob.after_batch(SimpleNamespace(batch_id=batch_id))
    return planned


def test_a_change_of_the_input_partitions_commits_with_the_first_batch_it_was_planned_for(tmp_path):
    knob = InputPartitions(partitions=2)
    knob.plugged(SimpleNamespace(journal=Journal(tmp_path)))
    assert batch(knob, 0) == 2
    knob.set_param("partitions", 2)  # no change: no transaction
    knob.set_param("partitions", 6)
    [txn] = Journal(tmp_path).transactions()
    assert (txn["op"], txn["old"], txn["value"], txn["state"]) == ("source_partitions", 2, 6, "prepared")
    # a batch admitted before the change runs on: the change is not applied to it
    knob.before_batch(SimpleNamespace(batch_id=1, admission={}))
    knob.after_batch(SimpleNamespace(batch_id=1))
    assert Journal(tmp_path).transactions()[0]["state"] == "prepared"
    assert batch(knob, 2) == 6
    [txn] = Journal(tmp_path).transactions()
    assert (txn["state"], txn["batch_id"]) == ("committed", 2)
    steps = [e["state"] for e in map(__import__("json").loads, (tmp_path / "reconfig.jsonl").read_text().splitlines())]
    assert steps == ["requested", "prepared", "applied", "committed"]
    # a crash before the commit: the restarted run's partitions say which configuration is in force
    knob.set_param("partitions", 3)
    [_, open_txn] = Journal(tmp_path).transactions()
    assert recovery_plan([open_txn], state_partitions=None, rolled_back=None, in_force=knob.in_force()) == {
        open_txn["txn"]: ("committed", "the restarted run has source_partitions = 3 in force")}
    assert recovery_plan([open_txn], state_partitions=None, rolled_back=None,
                         in_force=InputPartitions(partitions=6).in_force())[open_txn["txn"]][0] == "aborted"


def test_without_a_journal_the_knob_only_changes():
    knob = InputPartitions(partitions=2)
    knob.set_param("partitions", 4)
    assert batch(knob, 0) == 4
