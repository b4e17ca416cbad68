"""Side by side on one real Apache Kafka cluster: the producers Kafka users run today and ours.

``python -m compare`` (with ``bench/`` on the path; ``make compare`` does this) starts a 5-broker
cluster (``tests/realkafka``), puts every contender through the same steps and prints one table
per scenario:

1. *Producers*: 12 partitions, RF 3, min ISR 2, each producer at the same steady rate; brokers 4
   and 5 paused (SIGSTOP) for a window in the middle, which leaves partitions 5, 8 and 9 below
   min ISR (``tests/kafka/support.py:spread``). Every message is consumed back afterwards.
2. *Spark*: one Spark job writing rows by Spark's Kafka sink and by ``write_to_kafka``, healthy
   and with brokers 4 and 5 paused mid-job (``spark_jobs.py``).
3. *Mirrors*: MirrorMaker 2 and ``failover-mirror`` copying one topic, healthy and with the
   target's brokers 4 and 5 paused mid-copy (``mirror.py``, the processes in ``processes.py``).
4. *Throughput, healthy*: messages per second, 100-byte values, acks=all, alternated rounds,
   medians, as ratios to the raw confluent-kafka producer.

``scenario.py`` drives the producers (``contenders.py``; the Java and Sarama programs through
``programs.py``, built by ``java.py`` and ``sarama.py``); ``report.py`` prints, writes the JSON
report and draws the plots.
"""
