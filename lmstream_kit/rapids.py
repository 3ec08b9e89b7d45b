"""Turn a device plan into RAPIDS Accelerator confs, pure Python (no pyspark).

The RAPIDS Accelerator for Apache Spark decides per *exec type* whether an operator may run on the
GPU: ``spark.rapids.sql.exec.<Exec>`` (``"true"``/``"false"``), plus the global switch
``spark.rapids.sql.enabled``.  All of them are read again at every physical planning, so a stream
can change them between micro-batches.  :func:`rapids_confs` maps a
:class:`~lmstream_kit.mapper.DevicePlan` to those keys, and :func:`conf_diff` says which of them
changed since the previous batch, so an adapter sets only those
(:func:`lmstream_kit.engine.rapids.apply_confs`).

The known keys are the ones rapids-4-spark 26.06.0 registers for Spark 4.1.1 (shipped as
``lmstream_kit/resources/rapids-4-spark-26.06-execs.csv``; ``data/rapids/README.md`` says where
the list came from).

Examples
--------
>>> from lmstream_kit.mapper import DeviceMapper, Operator, PlanDag
>>> dag = PlanDag((Operator(0, "HashAggregateExec", (1,)), Operator(1, "LocalTableScanExec", ())))
>>> big = DeviceMapper().map(dag, partition_bytes=100 * 150 * 1024)
>>> out = rapids_confs(big)
>>> out.confs
{'spark.rapids.sql.enabled': 'true', 'spark.rapids.sql.exec.HashAggregateExec': 'true'}
>>> out.skipped
{'LocalTableScanExec': 'no RAPIDS exec key; planned GPU (gpu cheaper)'}
>>> small = rapids_confs(DeviceMapper().map(dag, partition_bytes=1024))
>>> conf_diff(out.confs, small.confs).changed
{'spark.rapids.sql.enabled': 'false', 'spark.rapids.sql.exec.HashAggregateExec': 'false'}
"""

from __future__ import annotations

import csv
import functools
import io
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources

from .exceptions import ConfigError
from .mapper import GPU, DevicePlan

__all__ = [
    "EXEC_KEY_PREFIX",
    "PLUGIN_CLASS",
    "RAPIDS_CONF_CLASS",
    "RAPIDS_PACKAGE",
    "RAPIDS_SPARK_VERSION",
    "RAPIDS_VERSION",
    "SQL_ENABLED_KEY",
    "ConfDiff",
    "Conflict",
    "ExecKey",
    "RapidsConfs",
    "conf_diff",
    "exec_key",
    "exec_keys",
    "exec_table",
    "plugin_listed",
    "rapids_confs",
]

RAPIDS_VERSION = "26.06.0"
RAPIDS_PACKAGE = "com.nvidia:rapids-4-spark_2.13:26.06.0"
PLUGIN_CLASS = "com.nvidia.spark.SQLPlugin"
#: A class in the shim-specific part of the jar: loadable only once the plugin has set up its shim.
RAPIDS_CONF_CLASS = "com.nvidia.spark.rapids.RapidsConf"
#: The one Spark version whose shim the key list was taken from (26.06 matches versions exactly).
RAPIDS_SPARK_VERSION = "4.1.1"
SQL_ENABLED_KEY = "spark.rapids.sql.enabled"
EXEC_KEY_PREFIX = "spark.rapids.sql.exec."
KEY_FILE = "rapids-4-spark-26.06-execs.csv"


@dataclass(frozen=True)
class ExecKey:
    """One row of the shipped key list."""

    key: str
    exec_name: str
    default_enabled: bool


def _parse(text: str) -> dict[str, ExecKey]:
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
    reader = csv.DictReader(io.StringIO("\n".join(lines)))
    if reader.fieldnames != ["key", "exec", "default_enabled"]:
        raise ConfigError(f"{KEY_FILE}: unexpected header {reader.fieldnames}")
    table: dict[str, ExecKey] = {}
    for row in reader:
        name, key, default = row["exec"], row["key"], row["default_enabled"]
        if key != EXEC_KEY_PREFIX + name or default not in ("true", "false") or name in table:
            raise ConfigError(f"{KEY_FILE}: bad row {row}")
        table[name] = ExecKey(key, name, default == "true")
    if not table:
        raise ConfigError(f"{KEY_FILE} lists no keys")
    return table


@functools.lru_cache(maxsize=1)
def _table() -> dict[str, ExecKey]:
    text = (resources.files("lmstream_kit") / "resources" / KEY_FILE).read_text(encoding="utf-8")
    return _parse(text)


def exec_table() -> Mapping[str, ExecKey]:
    """The shipped key list, by exec class name (a copy; safe to modify)."""
    return dict(_table())


def exec_keys() -> frozenset[str]:
    """All shipped ``spark.rapids.sql.exec.<Exec>`` keys.

    >>> "spark.rapids.sql.exec.SortMergeJoinExec" in exec_keys(), len(exec_keys())
    (True, 53)
    """
    return frozenset(e.key for e in _table().values())


def _canonical(exec_name: str) -> str:
    # plan-graph names may drop the "Exec" suffix, as DeviceMapper accepts ("HashAggregate")
    table = _table()
    if exec_name not in table and exec_name + "Exec" in table:
        return exec_name + "Exec"
    return exec_name


def exec_key(exec_name: str) -> str | None:
    """The RAPIDS key of a Spark exec, or ``None`` when RAPIDS 26.06 has none for it.

    >>> exec_key("FilterExec"), exec_key("HashAggregate"), exec_key("StateStoreSaveExec")
    ('spark.rapids.sql.exec.FilterExec', 'spark.rapids.sql.exec.HashAggregateExec', None)
    """
    entry = _table().get(_canonical(exec_name))
    return entry.key if entry else None


def plugin_listed(plugins_conf: str | None) -> bool:
    """Whether a ``spark.plugins`` value (comma-separated class names) names the RAPIDS plugin.

    >>> plugin_listed("org.example.Other, com.nvidia.spark.SQLPlugin"), plugin_listed(None)
    (True, False)
    """
    if not plugins_conf:
        return False
    return PLUGIN_CLASS in (part.strip() for part in plugins_conf.split(","))


@dataclass(frozen=True)
class Conflict:
    """An exec type that the plan puts on both devices (ids of its operators on each)."""

    exec_name: str
    gpu_ops: tuple[int, ...]
    cpu_ops: tuple[int, ...]


@dataclass(frozen=True)
class RapidsConfs:
    """The RAPIDS confs for one device plan: see :func:`rapids_confs`."""

    confs: dict[str, str]
    skipped: dict[str, str]
    conflicts: dict[str, Conflict]

    @property
    def enabled(self) -> bool:
        """Whether the plan sends anything to the GPU (``spark.rapids.sql.enabled``)."""
        return self.confs[SQL_ENABLED_KEY] == "true"

    def to_dict(self) -> dict:
        """A JSON-ready dict (for a metrics record)."""
        return {
            "confs": dict(self.confs),
            "skipped": dict(self.skipped),
            "conflicts": {
                name: {"gpu_ops": list(c.gpu_ops), "cpu_ops": list(c.cpu_ops)}
                for name, c in self.conflicts.items()
            },
        }


def rapids_confs(plan: DevicePlan, *, leave_unclassified: bool = False) -> RapidsConfs:
    """The RAPIDS confs that run ``plan`` the way the device mapper placed it.

    Rules
    -----
    * Every exec type of the plan that has a key in the shipped list gets
      ``spark.rapids.sql.exec.<Exec>``: ``"true"`` when it goes to the GPU, else ``"false"``.
      This includes execs the mapper left on the CPU for want of a Table II class (Python execs
      such as ``ArrowEvalPythonExec``, ``UnionExec``, ...), so what runs matches the recorded plan.
      With ``leave_unclassified=True`` those get no key and RAPIDS' own default applies to them.
    * RAPIDS switches exec *types*, not operator instances.  An exec type goes to the GPU only when
      **all** of its instances in the plan are on the GPU.  A type with instances on both devices
      is set to ``"false"`` and listed in ``conflicts``.  The CPU is the safe side: a wrong CPU
      placement costs time, while an operator forced onto the GPU against the plan also adds
      transitions the mapper did not price.
    * ``spark.rapids.sql.enabled`` is ``"true"`` when at least one exec key is ``"true"``, i.e. when
      something really goes to the GPU after the rule above, and ``"false"`` otherwise.  So a plan
      whose only GPU operators have no RAPIDS key (``LocalTableScanExec``) or lost a conflict does
      not switch RAPIDS on.
    * Exec types with no key (streaming state execs, ``LocalTableScanExec``, ``RDDScanExec``,
      ``WholeStageCodegenExec``, ...) are listed in ``skipped`` with the reason.  They run on the CPU
      whatever the plan says.

    Exec names without the ``Exec`` suffix are accepted, as in :func:`lmstream_kit.mapper.exec_class`.
    Keys come in plan order, after ``spark.rapids.sql.enabled``.

    Examples
    --------
    >>> from lmstream_kit.mapper import DevicePlan, OperatorPlacement
    >>> plan = DevicePlan((
    ...     OperatorPlacement(0, "FilterExec", "Filter", "CPU", 1.0, 2.0, "cpu cheaper"),
    ...     OperatorPlacement(1, "FilterExec", "Filter", "GPU", 2.0, 1.0, "gpu cheaper"),
    ...     OperatorPlacement(2, "SortExec", "Sort", "GPU", 2.0, 1.0, "gpu cheaper"),
    ... ), inflection_point=1.0, partition_bytes=1.0)
    >>> out = rapids_confs(plan)
    >>> out.confs["spark.rapids.sql.exec.FilterExec"], out.confs["spark.rapids.sql.exec.SortExec"]
    ('false', 'true')
    >>> out.conflicts["FilterExec"]
    Conflict(exec_name='FilterExec', gpu_ops=(1,), cpu_ops=(0,))
    """
    table = _table()
    gpu_ops: dict[str, list[int]] = {}
    cpu_ops: dict[str, list[int]] = {}
    skipped: dict[str, str] = {}
    order: list[str] = []
    for entry in plan.entries:
        name = _canonical(entry.exec_name)
        if name not in table:
            skipped.setdefault(name, f"no RAPIDS exec key; planned {entry.device} ({entry.reason})")
            continue
        if leave_unclassified and entry.op_class is None:
            skipped.setdefault(name, f"no Table II class ({entry.reason}); left to RAPIDS' default")
            continue
        if name not in gpu_ops:
            order.append(name)
            gpu_ops[name], cpu_ops[name] = [], []
        (gpu_ops if entry.device == GPU else cpu_ops)[name].append(entry.id)

    exec_confs: dict[str, str] = {}
    conflicts: dict[str, Conflict] = {}
    for name in order:
        on_gpu = bool(gpu_ops[name]) and not cpu_ops[name]
        exec_confs[table[name].key] = "true" if on_gpu else "false"
        if gpu_ops[name] and cpu_ops[name]:
            conflicts[name] = Conflict(name, tuple(gpu_ops[name]), tuple(cpu_ops[name]))
    enabled = "true" if "true" in exec_confs.values() else "false"
    return RapidsConfs({SQL_ENABLED_KEY: enabled, **exec_confs}, skipped, conflicts)


@dataclass(frozen=True)
class ConfDiff:
    """What to do to go from the confs applied last batch to the ones wanted now.

    ``changed``: keys to set (new, or with another value).  ``unchanged``: keys already at their
    value.  ``stale``: keys applied before that the new confs do not mention; they are left as they
    are (unsetting would also drop a value the user passed with ``--conf``), and they only concern
    exec types the new plan does not have.  ``applied``: what the session holds once ``changed`` is
    set.
    """

    changed: dict[str, str]
    unchanged: frozenset[str]
    stale: frozenset[str]
    applied: dict[str, str]


def _check_confs(name: str, confs: Mapping) -> None:
    for key, value in confs.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise ConfigError(f"{name} must map str to str, got {key!r}: {value!r}")


def conf_diff(previous: Mapping[str, str] | None, current: Mapping[str, str]) -> ConfDiff:
    """Compare the confs applied for the previous batch with the ones wanted now.

    ``previous=None`` means nothing was applied yet: every key is changed.

    >>> d = conf_diff({"a": "true", "b": "true", "old": "false"}, {"a": "true", "b": "false", "c": "true"})
    >>> d.changed, sorted(d.unchanged), sorted(d.stale)
    ({'b': 'false', 'c': 'true'}, ['a'], ['old'])
    >>> d.applied
    {'a': 'true', 'b': 'false', 'old': 'false', 'c': 'true'}
    """
    previous = dict(previous or {})
    _check_confs("previous confs", previous)
    _check_confs("confs", current)
    changed = {k: v for k, v in current.items() if previous.get(k) != v}
    return ConfDiff(
        changed=changed,
        unchanged=frozenset(k for k in current if k not in changed),
        stale=frozenset(k for k in previous if k not in current),
        applied={**previous, **current},
    )
