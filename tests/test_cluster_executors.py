"""lmstream_kit.tune.executors: the executor total as a live parameter, each change a journal
transaction (pure: a host that scales as a cluster would; the real cluster is in tests/test_cluster.py)."""

from __future__ import annotations

import pytest

from lmstream_kit.exceptions import ConfigError, EngineError
from lmstream_kit.journal import Journal, recovery_plan
from lmstream_kit.tune.executors import ClusterExecutors


class Ctx:
    def __init__(self, batch_id):
        self.batch_id = batch_id


class Host:
    """A stream on a cluster of ``free`` cores: scaling takes 4 s up, 5 s down (as measured)."""

    def __init__(self, run_dir, count=2, free=3, reason=None):
        self.journal = Journal(run_dir)
        self.count, self.free, self.reason, self.asked = count, free, reason, []

    def executors_unsupported(self):
        return self.reason

    def executor_count(self):
        return self.count

    def scale_executors(self, total, timeout_s=60.0):
        self.asked.append(total)
        if total > self.free:
            raise EngineError(f"the application has {self.count} executors, not {total}, after {timeout_s:g} s "
                              "(has the cluster enough free cores?)")
        before, self.count = self.count, total
        return {"from": before, "to": total, "seconds": 4.0 if total > before else 5.0,
                "killed": [str(i) for i in range(total, before)], "before": [str(i) for i in range(before)]}


def steps(journal):
    return [(e["txn"], e["state"], e.get("batch_id")) for e in journal.entries()]


def test_a_scale_is_applied_by_the_next_batch_and_committed_when_it_completed(tmp_path):
    host = Host(tmp_path)
    knob = ClusterExecutors()
    knob.plugged(host)
    assert knob.executors == 2 and knob.disabled_reason("executors") is None
    assert knob.before_batch(Ctx(0)) == {"executors": 2}
    knob.set_param("executors", 1)
    assert host.asked == [1] and knob.executors == 1
    assert [c.to_dict()["param"] for c in knob.changelog.pending()] == ["cluster.executors"]
    assert knob.before_batch(Ctx(1)) == {"executors": 1}
    knob.after_batch(Ctx(1))
    [txn] = host.journal.transactions()
    assert (txn["op"], txn["old"], txn["value"], txn["state"], txn["batch_id"], txn["seconds"], txn["killed"],
            txn["before"]) == ("cluster_executors", 2, 1, "committed", 1, 5.0, ["1"], ["0", "1"])
    assert steps(host.journal) == [(1, "requested", None), (1, "prepared", None), (1, "applied", 1),
                                   (1, "committed", 1)]
    knob.set_param("executors", 1)  # what it has already: nothing to do, no transaction
    assert host.asked == [1] and len(host.journal.transactions()) == 1
    assert knob.in_force() == {"cluster_executors": 1}


def test_executors_the_cluster_cannot_give_abort_the_change_and_the_stream_keeps_its_own(tmp_path):
    host = Host(tmp_path, free=3)
    knob = ClusterExecutors(timeout_s=7)
    knob.plugged(host)
    with pytest.raises(EngineError, match="not 4, after 7 s"):
        knob.set_param("executors", 4)
    [txn] = host.journal.transactions()
    assert txn["state"] == "aborted" and txn["reason"].startswith("scaling to 4 executors failed: EngineError: ")
    assert knob.before_batch(Ctx(5)) == {"executors": 2}  # read again from the host
    assert len(host.journal.transactions()) == 1


def test_a_stream_that_cannot_scale_refuses_in_one_line_and_journals_the_refusal(tmp_path):
    host = Host(tmp_path, reason="master local[2] runs one executor, the driver: executors change only on a cluster")
    knob = ClusterExecutors()
    knob.plugged(host)
    assert knob.executors is None and knob.before_batch(Ctx(0)) is None and knob.in_force() == {}
    with pytest.raises(ConfigError, match=r"^cannot set cluster.executors to 2: master local\[2\] runs one executor"):
        knob.set_param("executors", 2)
    with pytest.raises(ConfigError, match=r"^cluster.executors must be >= 1, got 0$"):
        knob.set_param("executors", 0)
    [txn] = host.journal.transactions()
    assert txn["state"] == "aborted" and "runs one executor" in txn["reason"] and host.asked == []


def test_after_a_crash_an_open_scale_ends_by_the_executors_the_restarted_application_has(tmp_path):
    host = Host(tmp_path)
    knob = ClusterExecutors()
    knob.plugged(host)
    knob.set_param("executors", 3)  # there, but the driver died before a batch ran with them
    assert host.journal.open()[0]["state"] == "prepared"
    restarted = ClusterExecutors()
    restarted.plugged(Host(tmp_path / "new", count=2))  # a new application: the executors it starts with
    host.journal.resolve(recovery_plan(host.journal.open(), state_partitions=None, rolled_back=None,
                                       in_force=restarted.in_force()))
    [txn] = Journal(tmp_path).transactions()
    assert (txn["state"], txn["recovered"]) == ("aborted", True)
    assert txn["reason"].endswith("the restarted run has cluster_executors = 2 in force")


def test_batches_go_on_while_spark_adds_or_removes_executors(tmp_path):
    import threading

    host = Host(tmp_path)
    started, release = threading.Event(), threading.Event()
    scale = host.scale_executors

    def slow_scale(total, timeout_s=60.0):
        started.set()
        release.wait(30)
        return scale(total, timeout_s)

    host.scale_executors = slow_scale
    knob = ClusterExecutors()
    knob.plugged(host)
    asker = threading.Thread(target=knob.set_param, args=("executors", 3), daemon=True)
    asker.start()
    assert started.wait(30)
    ran = []
    batch = threading.Thread(target=lambda: ran.append(knob.before_batch(Ctx(7))), daemon=True)
    batch.start()
    batch.join(10)
    release.set()
    asker.join(30)
    assert ran == [{"executors": 2}]  # the batch that started during the scale ran on the executors it had
    assert knob.before_batch(Ctx(8)) == {"executors": 3}
