"""Internals of :mod:`failover_partitioner.spark`: the driver side and the executor side.

``columns`` and ``options`` run on the driver and decide everything that can be decided before
a job starts; ``executor`` is what each Spark task runs. Only ``failover_partitioner.spark`` is
public.
"""
