"""The stages a micro-batch ran and what each cost, from Spark's own status store (py4j).

Spark keeps, for every job and stage, the numbers its monitoring REST API serves (task count,
run and CPU time summed over tasks, records read and written, shuffle fetch wait and write time,
submission and completion times) in the driver's ``AppStatusStore``, whether or not the web UI is
on.  :func:`batch_stages` reads them for the jobs of one streaming batch: the jobs whose group is
the query's run id (Structured Streaming sets it, and jobs started inside foreachBatch inherit it)
and whose description ends with ``batch = N``.  Each job and stage is read as the REST API's JSON
(Jackson, one py4j call each), so the fields keep the API's names.

The store is fed by Spark's listener bus, a few milliseconds behind the jobs; :func:`batch_stages`
waits (``timeout``) until every job of the batch is in a final state.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

__all__ = ["STAGE_FIELDS", "StageReader", "run_id_of_batch", "stage_reader_for"]

#: the stage fields kept (the REST API's names); times in ms, except shuffleWriteTime (ns)
STAGE_FIELDS = (
    "stageId", "attemptId", "status", "numTasks", "numCompleteTasks", "numFailedTasks", "executorRunTime",
    "executorCpuTime", "executorDeserializeTime", "jvmGcTime", "inputRecords", "inputBytes", "outputRecords",
    "outputBytes", "shuffleReadRecords", "shuffleReadBytes", "shuffleFetchWaitTime", "shuffleWriteRecords",
    "shuffleWriteBytes", "shuffleWriteTime", "peakExecutionMemory", "memoryBytesSpilled", "diskBytesSpilled",
    "submissionTime", "completionTime", "name",
)
_FINAL = {"SUCCEEDED", "FAILED"}


class StageReader:
    """Reads the jobs and stages of streaming batches from one SparkContext's status store.

    One reader per session; it remembers the jobs it has read, so each batch looks only at new ones.
    """

    def __init__(self, spark) -> None:
        self._sc = spark.sparkContext
        jvm = self._sc._jvm
        self._store = self._sc._jsc.sc().statusStore()
        self._mapper = jvm.com.fasterxml.jackson.databind.ObjectMapper()
        scala_module = getattr(getattr(jvm.com.fasterxml.jackson.module.scala, "DefaultScalaModule$"), "MODULE$")
        self._mapper.registerModule(scala_module)
        self._done: set[int] = set()  # jobs already read (of earlier batches)

    def _json(self, obj) -> dict:
        return json.loads(self._mapper.writeValueAsString(obj))

    def batch_stages(self, run_id: str, batch_id: int, *, timeout: float = 1.0) -> list[dict]:
        """The stages of batch ``batch_id`` of the run ``run_id``, each a dict of :data:`STAGE_FIELDS`
        plus ``job`` (the job's index in the batch) and ``position`` (the stage's index in its job,
        upstream first: Spark numbers a stage's parents before it).

        Waits up to ``timeout`` seconds for the batch's jobs to be final in the store; returns what
        it has then (a job still running is left out).
        """
        pattern = re.compile(rf"(^|\n)batch = {int(batch_id)}\s*$")
        deadline = time.monotonic() + timeout
        while True:
            jobs = []
            pending = False
            for job_id in sorted(self._sc.statusTracker().getJobIdsForGroup(run_id)):
                if job_id in self._done:
                    continue
                job = self._json(self._store.job(job_id))
                if not pattern.search(job.get("description") or ""):
                    if job.get("status") in _FINAL:
                        self._done.add(job_id)  # another batch's, finished: never looked at again
                    continue
                if job.get("status") not in _FINAL:
                    pending = True
                    continue
                jobs.append(job)
            if not pending or time.monotonic() >= deadline:
                break
            time.sleep(0.01)
        stages = []
        for index, job in enumerate(jobs):
            self._done.add(int(job["jobId"]))
            for position, stage_id in enumerate(sorted(job.get("stageIds") or [])):
                try:
                    data = self._json(self._store.lastStageAttempt(stage_id))
                except Exception:  # noqa: BLE001  (a stage the store has already dropped)
                    continue
                stage = {k: data.get(k) for k in STAGE_FIELDS}
                stages.append({"job": index, "jobId": int(job["jobId"]), "position": position, **stage})
        return stages


def run_id_of_batch(session) -> str | None:
    """The job group (the streaming query's run id) of the jobs this thread starts, inside foreachBatch."""
    try:
        return session.sparkContext.getLocalProperty("spark.jobGroup.id")
    except Exception:  # noqa: BLE001
        return None


def stage_reader_for(spark) -> Any:
    """The session's reader (one per SparkContext, kept on it)."""
    sc = spark.sparkContext
    reader = getattr(sc, "_lmstream_stage_reader", None)
    if reader is None:
        reader = StageReader(spark)
        sc._lmstream_stage_reader = reader
    return reader
