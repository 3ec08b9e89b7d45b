"""Flumina on Spark: dependency-guided fork/join parallelism for stateful stream computations.

:mod:`.spec` holds the specification API (plain Python).  See docs/flumina.md.
"""

from .spec import Dependence, Event, Spec, define_spec, ordered, run_sequential, value_barrier_spec
from .plan import Plan, PlanNode, greedy_plan, random_plan, sequential_plan, user_plan
from .run import Round, Segment, Sync, fork_states, join_states, run_leaf, run_plan, segments
from .streams import Heartbeat, InputStream, Merger, merge_streams
from .examples import EXAMPLES
from .check import Samples, SpecReport, check_spec
from .equivalence import Matcher, assert_equivalent, bag, same_key, sequence
from .batches import BatchRunner
from .speculate import BatchResult, run_batch

__all__ = ["Dependence", "Event", "Spec", "define_spec", "ordered", "run_sequential", "value_barrier_spec",
           # plans, the parallel semantics, input streams, examples
           "Plan", "PlanNode", "greedy_plan", "random_plan", "sequential_plan", "user_plan",
           "Round", "Segment", "Sync", "fork_states", "join_states", "run_leaf", "run_plan", "segments",
           "Heartbeat", "InputStream", "Merger", "merge_streams", "EXAMPLES",
           # the law checker and the equivalence checker
           "Samples", "SpecReport", "check_spec", "Matcher", "assert_equivalent", "bag", "same_key", "sequence",
           # micro-batch by micro-batch, replay-safe
           "BatchRunner", "BatchResult", "run_batch"]
