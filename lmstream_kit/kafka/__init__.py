"""Apache Kafka for the kit: a broker for development, tests and demos (:class:`KafkaBroker`)."""

from .broker import KafkaBroker

__all__ = ["KafkaBroker"]
