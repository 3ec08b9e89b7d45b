"""The executors of a running Spark application on a cluster: count them, and scale to a total live.

What Spark allows at run time, found on Spark 4.1 on a standalone cluster started from the
installed PySpark (two 1-core workers, dynamic allocation off; ``tests/test_cluster.py``):

* ``SparkContext.killExecutors(ids)`` removes executors while a streaming query runs: about 5 s
  until the executor is gone; the query keeps running (its state stores load again elsewhere).
* ``requestTotalExecutors(n, 0, {})`` raises the target, and the cluster manager starts the
  missing executors: about 4 s until a new one registers.
* Lowering the target alone removes nothing; after a kill, ``requestExecutors(k)`` (a relative
  request) started nothing within 60 s, while a new total did.  So :meth:`Executors.scale_to`
  sets the total first and then kills the newest executors above it.
* ``spark.cores.max`` and ``spark.executor.cores`` are read when the application starts: changing
  them needs a new application (a restart of the query and its session).
* On ``local[N]`` there is one executor, the driver: nothing to scale.  With dynamic allocation on,
  Spark's own allocation manager owns the target, so this refuses.

Removing an executor loses the locality of the state stores it held (ANCHORS: "Dynamic
allocation"); they are loaded from the checkpoint on the next batch.
"""

from __future__ import annotations

import time

from ..exceptions import ConfigError, EngineError

__all__ = ["Executors"]


class Executors:
    """The executors of ``spark``'s application (see the module)."""

    def __init__(self, spark) -> None:
        self._sc = spark.sparkContext
        master = str(self._sc.master)
        if master.startswith("local"):
            raise ConfigError(f"master {master} runs one executor, the driver: executors change only on a cluster "
                              "(spark://..., yarn, k8s://...)")
        if str(self._sc.getConf().get("spark.dynamicAllocation.enabled", "false")).lower() == "true":
            raise ConfigError("spark.dynamicAllocation.enabled is true: Spark's allocation manager owns the "
                              "executor target, so they cannot be set by hand")

    @property
    def _jsc(self):
        return self._sc._jsc.sc()

    def ids(self) -> list[str]:
        """The executors' ids, oldest first (Spark numbers them as they register)."""
        found = self._sc._jvm.scala.jdk.javaapi.CollectionConverters.asJava(self._jsc.getExecutorIds())
        return sorted((str(x) for x in found), key=lambda i: (not i.isdigit(), int(i) if i.isdigit() else 0, i))

    def count(self) -> int:
        return len(self.ids())

    def scale_to(self, total: int, *, timeout_s: float = 60.0) -> dict:
        """Make the application run ``total`` executors; returns ``{"from", "to", "seconds", "killed", "before"}``.

        ``before`` is the executors' ids before the change, oldest first; ``killed`` the ids a scale-down
        removed, the newest of them.

        EngineError when they are not there within ``timeout_s`` (the cluster may have too few free
        cores), ConfigError for a total below 1.
        """
        if not isinstance(total, int) or total < 1:
            raise ConfigError(f"executors must be an integer >= 1, got {total!r}")
        t0 = time.monotonic()
        now = self.ids()
        empty = self._sc._jvm.PythonUtils.toScalaMap(self._sc._jvm.java.util.HashMap())
        self._jsc.requestTotalExecutors(total, 0, empty)
        killed: list[str] = []
        if total < len(now):
            killed = now[total:]  # the newest
            chosen = self._sc._jvm.java.util.ArrayList()
            for executor in killed:
                chosen.add(executor)
            self._jsc.killExecutors(self._sc._jvm.scala.jdk.javaapi.CollectionConverters.asScala(chosen).toSeq())
        deadline = t0 + timeout_s
        while self.count() != total:
            if time.monotonic() > deadline:
                raise EngineError(f"the application has {self.count()} executors, not {total}, after {timeout_s:g} s "
                                  "(has the cluster enough free cores?)")
            time.sleep(0.1)
        return {"from": len(now), "to": total, "seconds": round(time.monotonic() - t0, 2), "killed": killed,
                "before": now}
