"""Flumina on Spark: dependency-guided fork/join parallelism for stateful stream computations.

:mod:`.spec` holds the specification API (plain Python).  See docs/flumina.md.
"""

from .spec import Dependence, Event, Spec, define_spec, ordered, run_sequential, value_barrier_spec

__all__ = ["Dependence", "Event", "Spec", "define_spec", "ordered", "run_sequential", "value_barrier_spec"]
