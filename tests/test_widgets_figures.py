"""widgets.figures: the traces carry exactly the records' data (no kernel, no Spark)."""

from __future__ import annotations

import doctest
import json
import math

import pandas as pd
import plotly.graph_objects as go
import pytest

import widgets.figures as F
from lmstream_kit.metrics import JsonlWriter, load_metrics


def _rec(bid, rows=100, **kw):
    """A data batch record (or an empty one with rows=0, its fields None)."""
    if rows == 0:
        base = {"batch_id": bid, "rows": 0, "bytes": 0, "max_latency_s": None, "avg_latency_s": None,
                    "buffering_s": None, "processing_s": 0.5, "throughput_rows_s": 0.0, "completed_at": None,
                    "target_s": 2.0, "changes": None, "device_plan": None, "inflection_point": None,
                    "partition_bytes": None, "gpu_ops": None, "mapping_s": None, "optimizer_s": None}
    else:
        base = {"batch_id": bid, "rows": rows, "bytes": rows * 77, "max_latency_s": 1.0 + bid / 10,
                    "avg_latency_s": 0.5 + bid / 10, "buffering_s": 0.25 + bid / 100,
                    "processing_s": 0.75 + bid / 100, "throughput_rows_s": rows / (0.75 + bid / 100),
                    "completed_at": 1000.0 + bid, "target_s": 2.0, "changes": None, "device_plan": None,
                    "inflection_point": 153600.0 + bid, "partition_bytes": 100000.0 + 1000 * bid,
                    "gpu_ops": bid % 3, "mapping_s": 0.001 * bid, "optimizer_s": 0.002 * bid}
    base.update(kw)
    return base


PLAN = {
    "inflection_point": 153600.0,
    "partition_bytes": 65536.0,
    "entries": [
        {"id": 0, "exec_name": "HashAggregateExec", "op_class": "Aggregation", "device": "CPU",
         "cpu_cost": 1.2, "gpu_cost": 1.4, "reason": "cpu cheaper"},
        {"id": 1, "exec_name": "ShuffleExchangeExec", "op_class": "Shuffle", "device": "CPU",
         "cpu_cost": 1.1, "gpu_cost": 1.3, "reason": "cpu cheaper"},
        {"id": 2, "exec_name": "SortMergeJoinExec", "op_class": "Join", "device": "GPU",
         "cpu_cost": 1.0, "gpu_cost": 0.9, "reason": "gpu cheaper"},
        {"id": 3, "exec_name": "ProjectExec", "op_class": "Projection", "device": "GPU",
         "cpu_cost": 1.0, "gpu_cost": 0.8, "reason": "gpu cheaper"},
        {"id": 4, "exec_name": "MicroBatchScanExec", "op_class": "Scan", "device": "GPU",
         "cpu_cost": 0.9, "gpu_cost": 0.7, "reason": "gpu cheaper"},
        {"id": 5, "exec_name": "EventTimeWatermarkExec", "op_class": None, "device": "CPU",
         "cpu_cost": None, "gpu_cost": None, "reason": "streaming state exec"},
    ],
}
CHILDREN = {0: [1], 1: [2], 2: [3, 5], 3: [4]}


@pytest.fixture
def records():
    """Empty batch 0, data batches 1-6 (out of order), an empty batch 4, changes at 3 and 6."""
    recs = [
        _rec(3, rows=250, target_s=3.0,
             changes=[{"param": "slide_s", "old": 2.0, "value": 3.0, "at": 5.0}]),
        _rec(0, rows=0),
        _rec(1, rows=100),
        _rec(2, rows=200, device_plan=json.dumps(PLAN)),
        _rec(4, rows=0, target_s=3.0),
        _rec(5, rows=400, target_s=3.0),
        _rec(6, rows=150, target_s=2.5,
             changes=[{"param": "mapper.inflection_point", "old": 153600.0, "value": 65536.0},
                      {"param": "rate_scale", "value": 1.5}]),
    ]
    return recs


def _by_id(records):
    return {r["batch_id"]: r for r in records}


def _trace(fig, name):
    [t] = [t for t in fig.data if t.name == name]
    return t


def _annotations(fig):
    return [a.text for a in fig.layout.annotations]


def _vlines(fig):
    return [(s.x0, s.x1, s.line.dash) for s in fig.layout.shapes]


DATA_IDS = [1, 2, 3, 5, 6]
ALL_IDS = [0, 1, 2, 3, 4, 5, 6]
FIGURES = [F.latency_figure, F.batch_size_figure, F.throughput_figure, F.time_split_figure,
           F.inflection_figure]


# --------------------------------------------------------------------------- frame and markers


def test_records_frame_sorts_normalises_and_does_not_mutate(records):
    before = json.dumps(records, sort_keys=True)
    df = F.records_frame(records)
    assert df["batch_id"].tolist() == ALL_IDS
    assert df["max_latency_s"].dtype == "float64" and math.isnan(df["max_latency_s"][0])
    assert df["rows"].tolist() == [_by_id(records)[b]["rows"] for b in ALL_IDS]
    assert json.dumps(records, sort_keys=True) == before
    assert F.records_frame(pd.DataFrame(records))["batch_id"].tolist() == ALL_IDS


def test_records_frame_empty_and_missing_columns():
    for empty in (None, [], pd.DataFrame(), pd.DataFrame(columns=["batch_id", "rows"])):
        df = F.records_frame(empty)
        assert len(df) == 0
        assert {"batch_id", "rows", "target_s", "changes", "device_plan"} <= set(df.columns)
    df = F.records_frame([{"batch_id": 1}])
    assert math.isnan(df["rows"][0]) and df["changes"][0] is None


def test_change_markers(records):
    assert F.change_markers(records) == [
        (3, "slide_s=3"),
        (6, "mapper.inflection_point=65536, rate_scale=1.5"),
    ]
    assert F.change_markers([]) == []
    assert F.change_markers([{"batch_id": 1, "changes": []}, {"batch_id": 2}]) == []
    # a change recorded without a param (repr fallback of the stream) and a JSON string
    assert F.change_markers([{"batch_id": 9, "changes": [{"change": "Freeze()"}]},
                             {"batch_id": 8, "changes": '[{"param": "x", "value": 0.25}]'}]) == [
        (8, "x=0.25"), (9, "Freeze()")]


# --------------------------------------------------------------------------- latency


def test_latency_traces_are_the_records(records):
    fig = F.latency_figure(records)
    by = _by_id(records)
    mx, avg = _trace(fig, "max latency"), _trace(fig, "avg latency")
    assert list(mx.x) == DATA_IDS and list(avg.x) == DATA_IDS
    assert list(mx.y) == [by[b]["max_latency_s"] for b in DATA_IDS]
    assert list(avg.y) == [by[b]["avg_latency_s"] for b in DATA_IDS]
    assert fig.layout.yaxis.title.text == "latency (wall s)"
    assert fig.layout.xaxis.title.text == "batch id"
    assert fig.layout.title.text


def test_latency_bound_is_a_step_line_following_target_s(records):
    fig = F.latency_figure(records)
    bound = _trace(fig, "bound (target_s)")
    assert bound.line.shape == "hv"
    assert list(bound.x) == ALL_IDS
    assert list(bound.y) == [2.0, 2.0, 2.0, 3.0, 3.0, 3.0, 2.5]


def test_latency_bound_absent_for_baselines_and_gaps_for_missing(records):
    for r in records:
        r["target_s"] = None
    fig = F.latency_figure(records)
    assert [t.name for t in fig.data] == ["max latency", "avg latency"]
    records[0]["target_s"] = 4.0  # batch 3 only: the others become gaps
    bound = _trace(F.latency_figure(records), "bound (target_s)")
    assert list(bound.y) == [None, None, None, 4.0, None, None, None]


def test_change_markers_on_every_figure(records):
    for fn in FIGURES:
        fig = fn(records)
        assert _vlines(fig) == [(3, 3, "dash"), (6, 6, "dash")], fn.__name__
        assert _annotations(fig) == ["slide_s=3", "mapper.inflection_point=65536, rate_scale=1.5"]
        assert [a.x for a in fig.layout.annotations] == [3, 6]
        assert all(s.yref == "paper" and (s.y0, s.y1) == (0, 1) for s in fig.layout.shapes)


# --------------------------------------------------------------------------- size, throughput


def test_batch_size_figure(records):
    fig = F.batch_size_figure(records)
    by = _by_id(records)
    rows, nbytes = _trace(fig, "rows"), _trace(fig, "bytes")
    assert list(rows.x) == ALL_IDS and list(nbytes.x) == ALL_IDS
    assert list(rows.y) == [by[b]["rows"] for b in ALL_IDS]
    assert list(nbytes.y) == [by[b]["bytes"] for b in ALL_IDS]
    assert all(isinstance(v, int) for v in rows.y)
    assert nbytes.yaxis == "y2" and fig.layout.yaxis2.overlaying == "y"
    assert fig.layout.yaxis.title.text == "rows per batch"
    assert fig.layout.yaxis2.title.text == "bytes per batch"


def test_throughput_figure(records):
    fig = F.throughput_figure(records)
    by = _by_id(records)
    [t] = fig.data
    assert list(t.x) == DATA_IDS
    assert list(t.y) == [by[b]["throughput_rows_s"] for b in DATA_IDS]
    assert fig.layout.yaxis.title.text == "throughput (rows/s)"


# --------------------------------------------------------------------------- time split


def test_time_split_segments_sum_to_buffering_plus_processing(records):
    fig = F.time_split_figure(records)
    assert fig.layout.barmode == "stack"
    names = [t.name for t in fig.data]
    assert names == ["buffering", "processing (net of mapping/optimizer)", "mapping", "optimizer"]
    by = _by_id(records)
    for t in fig.data:
        assert isinstance(t, go.Bar) and list(t.x) == DATA_IDS
    assert list(_trace(fig, "buffering").y) == [by[b]["buffering_s"] for b in DATA_IDS]
    assert list(_trace(fig, "mapping").y) == [by[b]["mapping_s"] for b in DATA_IDS]
    assert list(_trace(fig, "optimizer").y) == [by[b]["optimizer_s"] for b in DATA_IDS]
    for i, b in enumerate(DATA_IDS):
        total = sum(t.y[i] for t in fig.data)
        assert total == pytest.approx(by[b]["buffering_s"] + by[b]["processing_s"], abs=1e-12)
    assert fig.layout.yaxis.title.text == "time (wall s)"


def test_time_split_without_mapping_fields():
    recs = [{"batch_id": 0, "rows": 5, "buffering_s": 0.5, "processing_s": 1.25},
            {"batch_id": 1, "rows": 5, "buffering_s": 0.25, "processing_s": 1.0}]
    fig = F.time_split_figure(recs)
    assert [t.name for t in fig.data] == ["buffering", "processing"]
    assert list(fig.data[1].y) == [1.25, 1.0]
    # mapping on one batch only: the other counts it as 0
    recs[1]["mapping_s"] = 0.25
    fig = F.time_split_figure(recs)
    assert list(_trace(fig, "mapping").y) == [None, 0.25]
    assert list(fig.data[1].y) == [1.25, 0.75]


# --------------------------------------------------------------------------- inflection


def test_inflection_figure(records):
    fig = F.inflection_figure(records)
    by = _by_id(records)
    ip, pb, gpu = (_trace(fig, n) for n in ("inflection point", "partition bytes", "GPU operators"))
    for t in (ip, pb, gpu):
        assert list(t.x) == DATA_IDS
    assert ip.line.shape == "hv" and ip.mode == "lines"
    assert pb.mode == "markers" and pb.yaxis in (None, "y")
    assert list(ip.y) == [by[b]["inflection_point"] for b in DATA_IDS]
    assert list(pb.y) == [by[b]["partition_bytes"] for b in DATA_IDS]
    assert list(gpu.y) == [by[b]["gpu_ops"] for b in DATA_IDS] and gpu.yaxis == "y2"
    assert fig.layout.yaxis.type == "log"


def test_inflection_figure_without_device_mapping():
    fig = F.inflection_figure([{"batch_id": 0, "rows": 5, "max_latency_s": 1.0}])
    assert list(fig.data) == []
    assert _annotations(fig) == ["no device mapping recorded"]


# --------------------------------------------------------------------------- empty, NaN, DataFrame


@pytest.mark.parametrize("fn", FIGURES)
@pytest.mark.parametrize("empty", [[], None, pd.DataFrame(), "only-empty-batches"])
def test_empty_inputs_give_the_annotation(fn, empty):
    if isinstance(empty, str):
        empty = [_rec(0, rows=0), _rec(1, rows=0)]
    fig = fn(empty)
    assert isinstance(fig, go.Figure)
    assert list(fig.data) == []
    assert _annotations(fig) == [F.EMPTY_TEXT] == ["no micro-batch yet"]
    assert fig.layout.title.text


@pytest.mark.parametrize("fn", FIGURES)
def test_nan_and_none_fields_do_not_break(fn, records):
    records.append({"batch_id": 7, "rows": 10, "max_latency_s": float("nan"), "bytes": None,
                    "changes": float("nan"), "target_s": float("nan")})
    fig = fn(records)
    fig.to_json()  # serialisable: no NaN objects left in odd places
    for t in fig.data:
        if t.y is not None:
            assert not any(isinstance(v, float) and math.isnan(v) for v in t.y if v is not None)


@pytest.mark.parametrize("fn", FIGURES)
def test_dataframe_and_list_give_identical_figures(fn, records):
    assert fn(pd.DataFrame.from_records(records)).to_dict() == fn(records).to_dict()


@pytest.mark.parametrize("fn", FIGURES)
def test_load_metrics_frame_gives_the_same_figure(fn, records, tmp_path):
    w = JsonlWriter(tmp_path / "metrics.jsonl", durable=False)
    for r in records:
        w.append(r)
    w.close()
    assert fn(load_metrics(tmp_path)).to_dict() == fn(records).to_dict()


# --------------------------------------------------------------------------- device plan


def test_plan_layout_chain_without_children():
    assert F.plan_layout(PLAN) == {i: (0.0, float(-i)) for i in range(6)}
    assert F.plan_edges(PLAN) == [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)]


def test_plan_layout_layers_with_children():
    pos = F.plan_layout(PLAN, CHILDREN)
    assert set(pos) == set(range(6))
    assert [pos[i][1] for i in range(6)] == [0.0, -1.0, -2.0, -3.0, -4.0, -3.0]
    # leaves at successive x in DFS order, parents centred over their children
    assert pos[4][0] == 0.0 and pos[5][0] == 1.0
    assert pos[3][0] == 0.0 and pos[2][0] == 0.5 and pos[1][0] == 0.5 and pos[0][0] == 0.5
    # string keys (as from JSON) and repeated calls give the same layout
    assert F.plan_layout(json.dumps(PLAN), {str(k): v for k, v in CHILDREN.items()}) == pos
    assert F.plan_layout(PLAN, CHILDREN) == pos


def test_plan_layout_dag_and_entries_children():
    # a shared child (DAG) is placed once, below the first parent that reaches it
    plan = {"entries": [{"id": i} for i in range(4)]}
    pos = F.plan_layout(plan, {0: [1, 2], 1: [3], 2: [3]})
    assert set(pos) == {0, 1, 2, 3} and pos[3][1] == -2.0
    assert F.plan_edges(plan, {0: [1, 2], 1: [3], 2: [3]}) == [(0, 1), (0, 2), (1, 3), (2, 3)]
    # entries that carry their own children lists are laid out as a tree
    with_kids = {"entries": [{"id": 0, "children": [1, 2]}, {"id": 1, "children": []},
                             {"id": 2, "children": []}]}
    assert F.plan_layout(with_kids) == {0: (0.5, 0.0), 1: (0.0, -1.0), 2: (1.0, -1.0)}


def _plan_nodes(fig):
    return [t for t in fig.data if t.mode == "markers+text"]


def _segments(trace):
    xs, ys = list(trace.x), list(trace.y)
    out = []
    for i in range(0, len(xs), 3):
        assert xs[i + 2] is None and ys[i + 2] is None
        out.append(((xs[i], ys[i]), (xs[i + 1], ys[i + 1])))
    return out


@pytest.mark.parametrize("as_", ["dict", "json", "object"])
def test_device_plan_figure_nodes_colours_edges(as_):
    class Obj:
        def to_dict(self):
            return PLAN

    plan = {"dict": PLAN, "json": json.dumps(PLAN), "object": Obj()}[as_]
    fig = F.device_plan_figure(plan, CHILDREN)
    nodes = _plan_nodes(fig)
    assert [t.name for t in nodes] == ["CPU", "GPU"]  # one legend entry per device
    ids = [i for t in nodes for i in t.customdata]
    assert sorted(ids) == [e["id"] for e in PLAN["entries"]]  # one node per operator
    entries = {e["id"]: e for e in PLAN["entries"]}
    pos = F.plan_layout(PLAN, CHILDREN)
    for t in nodes:
        assert t.marker.color == F.DEVICE_COLORS[t.name]
        assert all(entries[i]["device"] == t.name for i in t.customdata)
        assert [(x, y) for x, y in zip(t.x, t.y, strict=True)] == [pos[i] for i in t.customdata]
        assert list(t.text) == [entries[i]["exec_name"][:-4] for i in t.customdata]
        for i, hover in zip(t.customdata, t.hovertext, strict=True):
            e = entries[i]
            assert f"device: {e['device']}" in hover and e["reason"] in hover
            assert f"class: {e['op_class'] or '-'}" in hover
    assert F.DEVICE_COLORS["CPU"] != F.DEVICE_COLORS["GPU"]
    [edges] = [t for t in fig.data if t.mode == "lines"]
    segs = _segments(edges)
    pairs = [(p, c) for p, kids in CHILDREN.items() for c in kids]
    assert len(segs) == len(pairs) == 5
    assert sorted(segs) == sorted((pos[p], pos[c]) for p, c in pairs)
    assert "150.0 KiB" in fig.layout.title.text and "64.0 KiB" in fig.layout.title.text


def test_device_plan_figure_hover_costs_and_chain():
    fig = F.device_plan_figure(PLAN)
    [cpu] = [t for t in _plan_nodes(fig) if t.name == "CPU"]
    hover = dict(zip(cpu.customdata, cpu.hovertext, strict=True))
    assert "cpu cost: 1.200" in hover[0] and "gpu cost: 1.400" in hover[0]
    assert "cpu cost: -" in hover[5]
    [edges] = [t for t in fig.data if t.mode == "lines"]
    assert len(_segments(edges)) == 5 and edges.line.dash == "dot"
    assert edges.name == "pre-order (tree unknown)"


def test_device_plan_figure_empty_and_latest_plan(records):
    for empty in (None, {"entries": []}, {"inflection_point": 1.0, "partition_bytes": 1.0,
                                           "entries": []}):
        fig = F.device_plan_figure(empty)
        assert list(fig.data) == [] and _annotations(fig) == ["no device plan yet"]
    assert F.latest_plan(records) == PLAN
    assert F.latest_plan([]) is None
    assert F.latest_plan(pd.DataFrame.from_records(records)) == PLAN
    with pytest.raises(TypeError):
        F.device_plan_figure(42)


def test_device_plan_figure_from_mapper():
    from lmstream_kit import mapper

    dag = mapper.PlanDag((mapper.Operator(0, "HashAggregateExec", (1,)),
                          mapper.Operator(1, "ProjectExec", (2,)),
                          mapper.Operator(2, "MicroBatchScanExec")))
    plan = mapper.DeviceMapper().map(dag, 4 * 1024 * 1024)
    fig = F.device_plan_figure(plan)
    nodes = _plan_nodes(fig)
    assert sorted(i for t in nodes for i in t.customdata) == [0, 1, 2]
    for t in nodes:
        assert all(plan.device_of(i) == t.name for i in t.customdata)
    # the mapper's entries carry their children: drawn as the tree, one solid edge per pair
    [edges] = [t for t in fig.data if t.mode == "lines"]
    assert len(_segments(edges)) == 2 and edges.line.dash == "solid"


def test_module_doctest():
    result = doctest.testmod(F, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
