"""Reconfiguring a Flumina program between micro-batches (lmstream_kit.flumina.live): rescale, migrate
and swap the logic, each equal to the sequential run with the change at that boundary, journaled, and
crash-consistent through the snapshots."""

from __future__ import annotations

import pytest
from flumina_strategies import assert_same_up_to_dependence

from lmstream_kit.exceptions import ConfigError
from lmstream_kit.flumina import EXAMPLES, Event, greedy_plan, ordered, run_sequential
from lmstream_kit.flumina.batches import BatchRunner
from lmstream_kit.flumina.live import FluminaControl, moved_plan
from lmstream_kit.flumina.spec import value_barrier_spec
from lmstream_kit.journal import Journal


class Ctx:
    def __init__(self, batch_id):
        self.batch_id = batch_id


class Rec:
    def __init__(self, batch_id):
        self.batch_id = batch_id


class Host:
    """What a FluminaControl reads of a LiveStream: its journal and the workload's running program."""

    def __init__(self, runner, run_dir):
        self.journal = Journal(run_dir)
        self.batch_program = type("Program", (), {"runner": runner})()


def run_batch(control, runner, batch_id, events):
    """One micro-batch as the run loop drives it: before_batch, the program, after_batch."""
    fields = control.before_batch(Ctx(batch_id))
    out = runner.run(batch_id, events)
    control.after_batch(Rec(batch_id))
    return fields, out


def chunks(events, n):
    events = ordered(events)
    size = -(-len(events) // n)
    return [events[i:i + size] for i in range(0, len(events), size)]


@pytest.mark.parametrize("example", ["value_barrier", "fraud_detection", "page_view"])
def test_rescaling_up_and_down_between_batches_equals_the_sequential_run(example):
    ex = EXAMPLES.get(example)
    spec = ex.spec(4)
    events = ex.events(400, 4, 3)
    runner = BatchRunner(spec, greedy_plan(spec, 2))
    control = FluminaControl(runner)
    got, workers = [], []
    for batch_id, (batch, scale) in enumerate(zip(chunks(events, 5), [None, 4, 1, 3, None])):
        if scale is not None:
            control.set_param("workers", scale)
        fields, out = run_batch(control, runner, batch_id, batch)
        got += out
        workers.append(fields["flumina_workers"])
    assert workers == [2, 4, 1, 3, 3]
    state, pairs = spec.init(), []
    for e in ordered(events):
        state, out = spec.update(state, e)
        pairs += [(e, o) for o in out]
    assert runner.state() == state
    assert_same_up_to_dependence(spec.dependence, got, pairs)


def test_moving_tags_to_another_worker_carries_their_state_and_equals_the_sequential_run():
    spec = value_barrier_spec(3)
    events = EXAMPLES.get("value_barrier").events(300, 3, 5)
    runner = BatchRunner(spec, greedy_plan(spec, 3))
    control = FluminaControl(runner)
    batches = chunks(events, 3)
    got = run_batch(control, runner, 0, batches[0])[1]
    owner_before = runner.plan.owner("a2")
    control.move_tags(["a2"], to="w1")
    got += run_batch(control, runner, 1, batches[1])[1]
    assert (owner_before, runner.plan.owner("a2"), len(runner.plan.workers)) == ("w3", "w1", 2)
    assert runner.last.worker_events.get("w1", 0) > 0
    got += run_batch(control, runner, 2, batches[2])[1]
    state, outputs = run_sequential(spec, events)
    assert runner.state() == state
    assert [o for _, o in got] == outputs  # only the synchronising b emits: one order


def test_a_move_that_breaks_the_plan_is_refused_in_one_line_naming_it():
    spec = value_barrier_spec(2)
    control = FluminaControl(BatchRunner(spec, greedy_plan(spec, 2)))
    with pytest.raises(ConfigError, match=r"^cannot move \['b'\] to worker w1: .*depend on each other") as err:
        control.move_tags(["b"], to="w1")
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="there is no worker 'w9'"):
        control.move_tags(["a0"], to="w9")
    with pytest.raises(ConfigError, match="no node owns tag 'zz'"):
        moved_plan(greedy_plan(spec, 2), ["zz"], "w1")


def doubled(total, event):
    """The new logic: a-values count twice."""
    if event.tag == "b":
        return 0, [("b", event.ts, total)]
    return total + 2 * event.payload, []


def times_ten(total):
    return total * 10


def test_a_logic_swap_with_a_state_transformer_equals_old_then_transformed_then_new(tmp_path):
    spec = value_barrier_spec(2)
    events = EXAMPLES.get("value_barrier").events(200, 2, 1)
    batches = chunks(events, 4)
    runner = BatchRunner(spec, greedy_plan(spec, 2))
    control = FluminaControl(runner)
    control.plugged(Host(runner, tmp_path))
    got = run_batch(control, runner, 0, batches[0])[1] + run_batch(control, runner, 1, batches[1])[1]
    control.set_update(doubled, transform=times_ten)
    fields, out = run_batch(control, runner, 2, batches[2])
    got += out + run_batch(control, runner, 3, batches[3])[1]
    assert fields == {"flumina_workers": 2, "flumina_logic": "doubled"}

    new = value_barrier_spec(2).__class__(**{**value_barrier_spec(2).__dict__, "update": doubled})
    mid, first = run_sequential(spec, batches[0] + batches[1])
    end, second = run_sequential(new, batches[2] + batches[3], state=times_ten(mid))
    assert [o for _, o in got] == first + second
    assert runner.state() == end
    journal = Journal(tmp_path)
    [txn] = journal.transactions()
    assert (txn["op"], txn["old"], txn["value"], txn["state"], txn["batch_id"], txn["transform"]) == (
        "flumina_logic", "initial", "doubled", "committed", 2, "times_ten")
    assert [e["state"] for e in journal.entries()] == ["requested", "prepared", "applied", "committed"]


def test_a_transform_that_fails_aborts_the_swap_and_the_old_logic_runs_on(tmp_path):
    spec = value_barrier_spec(2)
    runner = BatchRunner(spec, greedy_plan(spec, 2))
    control = FluminaControl(runner)
    control.plugged(Host(runner, tmp_path))

    def broken(state):
        raise KeyError("total")

    control.set_update(doubled, transform=broken)
    fields, _ = run_batch(control, runner, 0, [Event("a0", 1, 5), Event("b", 2)])
    assert fields["flumina_logic"] == "initial" and runner.logic == "initial"
    assert runner.run(1, [Event("a0", 3, 4), Event("b", 4)]) [-1][1] == ("b", 4, 4)  # not doubled
    [txn] = Journal(tmp_path).transactions()
    assert txn["state"] == "aborted" and "applying flumina_logic = 'doubled' at batch 0 failed: KeyError" in txn["reason"]
    with pytest.raises(ConfigError, match="already named 'initial'"):
        control.set_update(doubled, name="initial")
    with pytest.raises(ConfigError, match="either update= .* or spec="):
        control.set_update()
    with pytest.raises(ConfigError, match="update must be a function"):
        control.set_update(42)


def test_a_restart_after_a_crash_never_runs_a_state_under_a_logic_it_was_not_made_by(tmp_path):
    spec = value_barrier_spec(2)
    new = spec.__class__(**{**spec.__dict__, "update": doubled})
    b0 = [Event("a0", 1, 5), Event("a1", 2, 7)]
    b1 = [Event("b", 3), Event("a0", 4, 1)]
    b2 = [Event("a1", 5, 2), Event("b", 6)]
    snaps = tmp_path / "snaps"
    live = BatchRunner(spec, greedy_plan(spec, 2), snapshots=snaps)
    live.run(0, b0)
    live.swap(new, logic="doubled", transform=times_ten)
    swapped = live.run(1, b1)  # the snapshot of batch 1 is saved, then the driver dies before Spark commits it
    assert [o for _, o in swapped] == [("b", 3, 120)]

    # restarted with the old logic: Spark replays batch 1, which runs as if the swap never happened
    old = BatchRunner(spec, greedy_plan(spec, 2), snapshots=snaps).restore()
    assert [o for _, o in old.run(1, b1)] == [("b", 3, 12)]
    # restarted with the new logic and no way to migrate the old state: refused, naming both logics
    bare = BatchRunner(new, greedy_plan(new, 2), snapshots=snaps, logic="doubled").restore()
    with pytest.raises(ConfigError, match=r"before batch 1 was made by logic 'initial', but this run's logic is "
                                          r"'doubled': .*migrations=\{'initial': transform\}"):
        bare.run(1, b1)
    # with the migration: the replay equals what the live run computed
    migrated = BatchRunner(new, greedy_plan(new, 2), snapshots=snaps, logic="doubled",
                           migrations={"initial": times_ten}).restore()
    assert migrated.run(1, b1) == swapped
    assert [o for _, o in migrated.run(2, b2)] == [("b", 6, 2 + 4)]

    # batch 2 committed under the new logic: the old logic may no longer run from it
    again = BatchRunner(spec, greedy_plan(spec, 2), snapshots=snaps).resume(2)
    with pytest.raises(ConfigError, match="after batch 2 was made by logic 'doubled'"):
        again.run(3, [Event("b", 7)])


def test_requests_are_journaled_and_a_request_before_the_program_runs_is_refused(tmp_path):
    spec = value_barrier_spec(3)
    runner = BatchRunner(spec, greedy_plan(spec, 3))
    control = FluminaControl(runner)
    control.plugged(Host(runner, tmp_path))
    control.set_param("workers", 1)
    control.move_tags(["a1"], to="w2")  # fits the plan now; after the rescale there is no w2
    fields, _ = run_batch(control, runner, 5, [Event("a1", 1, 2)])
    assert fields["flumina_workers"] == 1
    txns = Journal(tmp_path).transactions()
    assert [(t["op"], t["state"], t.get("batch_id")) for t in txns] == [
        ("flumina_workers", "committed", 5), ("flumina_plan", "aborted", 5)]
    assert "at batch 5 failed: there is no worker 'w2' to move tags to; workers: w0" in txns[1]["reason"]
    assert control.in_force() == {"flumina_workers": 1, "flumina_logic": "initial"}

    unstarted = FluminaControl()
    unstarted.plugged(type("Host", (), {"journal": Journal(tmp_path / "u"), "batch_program": None})())
    with pytest.raises(ConfigError, match="has not started yet"):
        unstarted.set_param("workers", 2)
    [txn] = Journal(tmp_path / "u").transactions()
    assert txn["state"] == "aborted" and "has not started yet" in txn["reason"]


def test_a_logic_that_fails_on_its_first_batch_is_undone_and_that_batch_runs_under_the_old_one(tmp_path):
    spec = value_barrier_spec(3)
    runner = BatchRunner(spec, greedy_plan(spec, 3))
    control = FluminaControl(runner)
    control.plugged(Host(runner, tmp_path))
    run_batch(control, runner, 0, [Event("a0", 1, 5), Event("a1", 2, 7)])

    def broken(total, event):
        raise ValueError(f"no update for {event.tag}")

    control.set_param("workers", 2)  # in force with the swap at batch 1, and kept when the swap is undone
    control.set_update(broken)
    fields, out = run_batch(control, runner, 1, [Event("a2", 3, 1), Event("b", 4)])
    assert [o for _, o in out] == [("b", 4, 13)]
    assert (runner.logic, len(runner.plan.workers), runner.swap_failed) == (
        "initial", 2, (1, "broken", "ValueError: no update for a2"))
    txns = Journal(tmp_path).transactions()
    assert [(t["op"], t["state"]) for t in txns] == [("flumina_workers", "committed"), ("flumina_logic", "aborted")]
    assert txns[1]["reason"] == ("logic 'broken' failed on batch 1, which ran again under 'initial': "
                                 "ValueError: no update for a2")
    assert run_batch(control, runner, 2, [Event("a1", 5, 2), Event("b", 6)])[1][-1][1] == ("b", 6, 2)


def test_asking_for_the_workers_the_next_batch_runs_on_changes_nothing(tmp_path):
    spec = value_barrier_spec(3)
    runner = BatchRunner(spec, greedy_plan(spec, 2))
    control = FluminaControl()
    host = Host(runner, tmp_path)
    control.plugged(host)
    control.set_param("workers", 2)  # in force already: no transaction, no change
    assert host.journal.transactions() == [] and control.changelog.take() == []
    control.set_param("workers", 3)
    control.set_param("workers", 2)  # back to 2 before the boundary: a change of its own, after the 3
    assert [(t["value"], t["state"]) for t in host.journal.transactions()] == [(3, "prepared"), (2, "prepared")]
    control.before_batch(Ctx(0))
    assert control.workers == 2


def test_more_workers_than_the_spec_has_independent_tag_groups_is_refused(tmp_path):
    spec = value_barrier_spec(3)  # a0, a1, a2 under the barrier b: three workers at most
    control = FluminaControl()
    host = Host(BatchRunner(spec, greedy_plan(spec, 2)), tmp_path)
    control.plugged(host)
    with pytest.raises(ConfigError, match=r"^flumina.workers must be <= 3 for spec value_barrier \(one worker "
                                          r"per independent group of tags at most\), got 4$"):
        control.set_param("workers", 4)
    control.set_param("workers", 3)
    assert [(t["value"], t["state"]) for t in host.journal.transactions()] == [(4, "aborted"), (3, "prepared")]


# -- logics by name, and moves as a parameter (what `reconfigure --set` and the dashboard ask) -------
def named_runner(tmp_path, **kw):
    """A runner on value barrier with a second logic by name, ``v2`` (its outputs labelled)."""
    from lmstream_kit.flumina.examples import labelled

    spec = value_barrier_spec(3)
    v2 = spec.__class__(**{**spec.__dict__, "update": labelled(spec.update, "v2")})
    return spec, BatchRunner(spec, greedy_plan(spec, 2), snapshots=tmp_path / "snaps",
                             logics={"initial": (spec, None), "v2": (v2, None)}, **kw)


def test_a_logic_swapped_by_name_is_journaled_and_a_restart_goes_on_under_it(tmp_path):
    spec, runner = named_runner(tmp_path)
    control = FluminaControl(runner, logics=("v2",))
    control.plugged(Host(runner, tmp_path))
    assert control.param("logic").choices == ("initial", "v2")
    b0, b1, b2 = [Event("a0", 1, 5), Event("b", 2)], [Event("a1", 3, 7), Event("b", 4)], [Event("a2", 5, 1), Event("b", 6)]
    assert [o for _, o in run_batch(control, runner, 0, b0)[1]] == [("b", 2, 5)]
    control.set_param("logic", "v2")
    control.set_param("logic", "v2")  # what the next batch runs under already: no second transaction
    fields, out = run_batch(control, runner, 1, b1)
    assert fields["flumina_logic"] == "v2" and [o for _, o in out] == [("v2", ("b", 4, 7))]
    [txn] = Journal(tmp_path).transactions()
    assert (txn["op"], txn["old"], txn["value"], txn["state"], txn["batch_id"]) == (
        "flumina_logic", "initial", "v2", "committed", 1)

    # the driver dies after batch 1's snapshot; the restart is started with the initial logic, as the
    # workload says, and takes v2 from the snapshot: Spark's replay of batch 1 and batch 2 run under it
    _, again = named_runner(tmp_path)
    again.restore()
    assert again.logic == "v2"
    assert again.run(1, b1) == out
    assert [o for _, o in again.run(2, b2)] == [("v2", ("b", 6, 1))]
    # back to the initial logic by name, and a restart after that goes on under the initial one
    control = FluminaControl(again, logics=("v2",))
    control.plugged(Host(again, tmp_path / "j2"))
    control.set_param("logic", "initial")
    assert [o for _, o in run_batch(control, again, 3, [Event("a0", 7, 2), Event("b", 8)])[1]] == [("b", 8, 2)]
    assert named_runner(tmp_path)[1].restore().logic == "initial"


def test_a_logic_the_program_does_not_declare_is_refused_naming_the_declared_ones(tmp_path):
    _, runner = named_runner(tmp_path)
    control = FluminaControl(runner, logics=("v2",))
    control.plugged(Host(runner, tmp_path))
    with pytest.raises(ConfigError, match=r"^flumina.logic must be one of 'initial', 'v2', got 'v3'$"):
        control.set_param("logic", "v3")
    with pytest.raises(ConfigError, match="'v2' names a logic this program declares: swap to it by name"):
        control.set_update(doubled, name="v2")
    assert Journal(tmp_path).transactions() == []
    assert all(p.name != "logic" for p in FluminaControl(runner).PARAMS)  # no names, no menu


def test_a_restart_after_a_swap_that_did_not_reach_its_snapshot_stays_under_the_old_logic(tmp_path):
    _, runner = named_runner(tmp_path)
    control = FluminaControl(runner, logics=("v2",))
    host = Host(runner, tmp_path)
    control.plugged(host)
    run_batch(control, runner, 0, [Event("a0", 1, 5)])
    control.set_param("logic", "v2")
    control.before_batch(Ctx(1))  # applied; the driver dies before batch 1's program saved anything
    _, again = named_runner(tmp_path)
    again.restore()
    assert again.logic == "initial"
    recovered = FluminaControl(again, logics=("v2",))
    recovered.plugged(Host(again, tmp_path))
    from lmstream_kit.journal import recovery_plan

    host.journal.resolve(recovery_plan(host.journal.open(), state_partitions=None, rolled_back=None,
                                       in_force=recovered.in_force()))
    [txn] = Journal(tmp_path).transactions()
    assert (txn["state"], txn["recovered"]) == ("aborted", True)
    assert [o for _, o in again.run(1, [Event("a1", 2, 1), Event("b", 3)])] == [("b", 3, 6)]


def test_move_as_a_parameter_moves_the_tags_named_as_the_spec_prints_them(tmp_path):
    spec = value_barrier_spec(3)
    runner = BatchRunner(spec, greedy_plan(spec, 3))
    control = FluminaControl(runner)
    control.plugged(Host(runner, tmp_path))
    assert control.move == ""
    control.set_param("move", " a2 , a1->w1 ")
    assert control.move == "a2, a1 -> w1"
    run_batch(control, runner, 0, [Event("a2", 1, 4)])
    assert (runner.plan.owner("a1"), runner.plan.owner("a2"), len(runner.plan.workers)) == ("w1", "w1", 1)
    [txn] = Journal(tmp_path).transactions()
    assert (txn["op"], txn["state"], txn["moved"], txn["to"]) == ("flumina_plan", "committed", ["'a2'", "'a1'"], "w1")
    with pytest.raises(ConfigError, match=r"^flumina.move: spec value_barrier has no tag 'a9'; its tags: a0, a1, a2, b$"):
        control.set_param("move", "a9 -> w1")
    with pytest.raises(ConfigError, match=r"^flumina.move takes 'TAG\[, TAG...\] -> WORKER', e.g. 'a2 -> w1', got 'a2'$"):
        control.set_param("move", "a2")
    with pytest.raises(ConfigError, match="flumina.move must be a str, got 3"):
        control.set_param("move", 3)
    control.set_param("move", "  ")  # an emptied box moves nothing
    assert len(Journal(tmp_path).transactions()) == 1


def test_moving_tags_to_the_worker_that_holds_them_changes_nothing(tmp_path):
    spec = value_barrier_spec(3)
    runner = BatchRunner(spec, greedy_plan(spec, 3))
    control = FluminaControl(runner)
    host = Host(runner, tmp_path)
    control.plugged(host)
    holder = runner.plan.owner("a0")
    control.set_param("move", f"a0 -> {holder}")
    assert host.journal.transactions() == [] and control.changelog.take() == []
    control.set_param("workers", 1)  # a change waits: the move is judged on the plan it will meet
    control.set_param("move", f"a0 -> {holder}")
    assert [t["op"] for t in host.journal.transactions()] == ["flumina_workers", "flumina_plan"]


def test_a_rescale_readies_the_hosts_workers_before_it_is_queued_and_a_failed_warm_up_changes_nothing(tmp_path):
    spec = value_barrier_spec(3)
    runner = BatchRunner(spec, greedy_plan(spec, 1))
    host = Host(runner, tmp_path)
    warmed = []

    def warm_workers(n):
        warmed.append((n, len(control._pending)))  # before the request is queued for the batch
        if n == 3:
            raise RuntimeError("Spark is busy")
        return 0.25

    host.warm_workers = warm_workers
    control = FluminaControl()
    control.plugged(host)
    control.set_param("workers", 2)
    control.set_param("workers", 3)  # the warm-up fails: only a head start, the rescale stands
    control.set_param("workers", 1)  # fewer workers: nothing to ready
    assert warmed == [(2, 0), (3, 1)]
    prepared = [e for e in host.journal.entries() if e["state"] == "prepared"]
    assert [e.get("warm_s") for e in prepared] == [0.25, None, None]
    assert prepared[1]["warm_error"] == "RuntimeError: Spark is busy" and "warm_error" not in prepared[2]
    control.before_batch(Ctx(0))
    assert control.workers == 1
