"""What a write did, counted on executors and summed on the driver through an accumulator."""

from __future__ import annotations

from dataclasses import dataclass, fields

from pyspark.accumulators import AccumulatorParam


@dataclass(frozen=True, slots=True, kw_only=True)
class WriteSummary:
    """Counts of one write (or, from :class:`KafkaBatchWriter`, of every batch so far).

    Only task attempts that succeeded are counted: Spark drops the accumulator updates of a
    failed attempt, whose rows are written again by the retry.

    - ``rows``: rows read from the DataFrame (``delivered + failed``);
    - ``delivered``: rows acknowledged by Kafka (``acks`` as configured);
    - ``rerouted``: times a failed row was produced again to another partition (a row moved
      twice counts twice);
    - ``possible_duplicates``: rows that may also sit in a partition where an attempt failed
      ambiguously (e.g. NOT_ENOUGH_REPLICAS_AFTER_APPEND, a timeout);
    - ``failed``: rows that finally failed; non-zero only with ``raise_on_failed_rows=False``,
      since otherwise such a task raises;
    - ``tasks``: Spark tasks (DataFrame partitions) that wrote;
    - ``producers_built``: producers those tasks had to build; far below ``tasks`` when Python
      workers are reused (``spark.python.worker.reuse``) and keep theirs between tasks.
    """

    rows: int = 0
    delivered: int = 0
    rerouted: int = 0
    possible_duplicates: int = 0
    failed: int = 0
    tasks: int = 0
    producers_built: int = 0

    def __add__(self, other: WriteSummary) -> WriteSummary:
        if not isinstance(other, WriteSummary):
            return NotImplemented
        return WriteSummary(
            **{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)}
        )


class SummaryParam(AccumulatorParam[WriteSummary]):
    """Adds summaries; Spark applies each successful task's update once."""

    def zero(self, value: WriteSummary) -> WriteSummary:
        return WriteSummary()

    def addInPlace(self, value1: WriteSummary, value2: WriteSummary) -> WriteSummary:
        return value1 + value2
