"""One SparkSession (``local[2]``) for every Spark test, started once and stopped at the end.

Starting a JVM costs seconds, so the session is shared; tests must not stop it or change its
configuration.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

_LOG4J = Path(__file__).with_name("log4j2.properties")


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    # Workers must run this interpreter (where the package is installed) and talk over loopback.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    session = (
        SparkSession.builder.master("local[2]")
        .appName("failover-partitioner-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={_LOG4J.as_uri()}")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()
