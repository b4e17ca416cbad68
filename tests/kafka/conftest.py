"""The real-Kafka layer: the cluster fixtures come from tests/realkafka/fixtures.py (loaded for
the whole suite); the Spark writer's test shares the Spark layer's session."""

from tests.spark.conftest import spark

__all__ = ["spark"]
