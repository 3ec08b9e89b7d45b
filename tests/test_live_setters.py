"""LiveStream's live setters on a stream that is not started (no Spark needed)."""

from __future__ import annotations

import pytest

from lmstream_kit.exceptions import ConfigError
from lmstream_kit.live import LiveStream


def make(tmp_path, workload="LR2S", **kw):
    kw.setdefault("policy", "lmstream")
    return LiveStream(workload, speedup=4, run_dir=tmp_path / "run", **kw)


def test_set_slide_before_start_changes_window_and_target(tmp_path):
    s = make(tmp_path)
    s.set_slide(5)
    assert s.workload.slide_s == 5.0 and s.workload.window_range_s == 30
    assert s.slide_s == 5.0
    assert s.controller.slide_s == pytest.approx(1.25)  # 5 simulated s at speedup 4
    assert s.controller.target_s == pytest.approx(0.625)  # before the first batch: half the bound
    assert s.optimizer.snapshot()["target_latency_s"] == pytest.approx(1.25)
    changes = s.pending_changes()
    assert changes[-1]["param"] == "window_slide_s" and changes[-1]["restart"] is False
    s.set_slide(5)  # no change: nothing recorded
    assert [c["param"] for c in s.pending_changes()] == ["window_slide_s"]


@pytest.mark.parametrize(
    "workload, slide, message",
    [
        ("LR2S", 45, "window slide must be in (0, 30] s (the window's range) for LR2S, got 45"),
        ("LR2S", 0, "window slide must be in (0, 30] s"),
        ("LR2S", "fast", "window slide must be a number of seconds, got 'fast'"),
        ("CM1T", 5, "workload CM1T has a tumbling window: its slide cannot change"),
    ],
)
def test_set_slide_rejects_bad_values_and_changes_nothing(tmp_path, workload, slide, message):
    s = make(tmp_path, workload)
    target, wl = s.controller.target_s, s.workload
    with pytest.raises(ConfigError) as err:
        s.set_slide(slide)
    assert message in str(err.value) and "\n" not in str(err.value)
    assert s.controller.target_s == target and s.workload is wl


def test_set_target_keeps_the_window(tmp_path):
    s = make(tmp_path)
    s.set_target(2)
    # 2 simulated s at speedup 4 is the bound, 0.5 s; before the first batch half of it
    assert (s.controller.slide_s, s.controller.target_s) == (pytest.approx(0.5), pytest.approx(0.25))
    assert s.workload.slide_s == 10
    with pytest.raises(ConfigError, match="latency target must be >= 0 seconds .* got -1"):
        s.set_target(-1)
    assert (s.controller.slide_s, s.controller.target_s) == (pytest.approx(0.5), pytest.approx(0.25))


def test_set_target_is_recorded_as_the_target_the_user_set_in_simulated_seconds(tmp_path):
    s = make(tmp_path)  # LR2S: a 10 s slide, the target's starting value; speedup 4
    s.set_target(2)
    assert [c.to_dict() | {"at": 0} for c in s.changelog.pending()] == [
        {"param": "target_s", "old": 10.0, "value": 2.0, "at": 0}]  # not the controller's slide_s (0.5 wall s)
    s.set_target(2.0)  # no change: nothing recorded
    s.set_target(0)
    assert [(c.param, c.old, c.value) for c in s.changelog.pending()] == [
        ("target_s", 10.0, 2.0), ("target_s", 2.0, 0.0)]


def test_set_slide_is_recorded_as_one_window_change(tmp_path):
    s = make(tmp_path)
    s.set_target(2)
    s.changelog.take()
    s.set_slide(5)  # the target follows the window: one change, the window's
    assert [(c.param, c.old, c.value) for c in s.changelog.pending()] == [("window_slide_s", 10.0, 5.0)]
    s.changelog.take()
    s.set_target(3)
    s.set_slide(5)  # the window stays; the bound moves back to the slide
    assert [(c.param, c.old, c.value) for c in s.changelog.pending()] == [("target_s", 5.0, 3.0),
                                                                          ("target_s", 3.0, 5.0)]


def test_set_policy_before_start_keeps_the_controller(tmp_path):
    s = make(tmp_path)
    controller = s.controller
    s.set_policy("asap")
    assert s.policy.name == "asap" and s.controller is None
    with pytest.raises(ConfigError, match="no latency bound"):
        s.set_target(3)
    s.set_policy("fixed", trigger_s=5)
    assert s.policy.trigger_s == 5.0
    s.set_policy("lmstream")
    assert s.controller is controller
    assert [(c["old"], c["value"]) for c in s.pending_changes()] == [
        ("lmstream", "asap"), ("asap", "fixed"), ("fixed", "lmstream")]
    with pytest.raises(ConfigError, match="unknown policy"):
        s.set_policy("fastest")


def test_remove_on_batch(tmp_path):
    s = make(tmp_path)
    seen = []
    s.on_batch(seen.append)
    s.remove_on_batch(seen.append)
    s.remove_on_batch(print)  # unknown: ignored
    assert s.callbacks == []


def test_an_admission_sees_a_new_target_only_with_its_change(tmp_path):
    """An admission between the new bound and its change log was decided under the new bound but
    left the change to the next batch (CI saw a record with the new target before the change)."""
    import threading

    from lmstream_kit.protocol import ADMISSION

    s = make(tmp_path)
    seen, threads = [], []
    apply = s.controller.set_slide

    def set_slide_then_admit(*args, **kwargs):
        apply(*args, **kwargs)

        def admission():  # what the run loop does when it admits: read the bound, take the changes
            with s.loop.lock:
                seen.append((s.controller.target_s, [c.param for c in s.changelog.take(ADMISSION)]))

        threads.append(threading.Thread(target=admission))
        threads[-1].start()
        threads[-1].join(0.5)

    s.controller.set_slide = set_slide_then_admit
    s.set_target(2)
    threads[-1].join(10)
    assert seen == [(pytest.approx(0.25), ["target_s"])]  # the 0.5 s bound, halved before the first batch
