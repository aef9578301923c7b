"""The audit's Spark session: ``local[*]`` by default, a cluster's master with ``--master``, or
a Spark Connect server with ``--remote sc://...``.

Owns: the settings every audit needs wherever it runs: the JDBC driver jars on the classpath
(``spark.jars``; over Spark Connect they are uploaded as session artifacts), times in UTC (the
session's zone, and the JVMs' default zone that JDBC drivers read a timestamp without time zone
in), no progress bars on the terminal. Must not: run a job.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from txmq.audit.spec import AuditInputError

UTC_JAVA_OPTION: Final = "-Duser.timezone=UTC"


def open_session(master: str, remote: str, jars: Sequence[Path]) -> Any:
    """A SparkSession for one audit; the caller stops it.

    Raises:
        AuditInputError: ``--remote`` is not an ``sc://`` URL.
        JavaMissingError: no Java 17+ for a session of our own.
    """
    if remote:
        return _remote_session(remote, jars)
    from pyspark.sql import SparkSession

    from txmq.spark.session import require_java
    from txmq.spark.source import TxmqDataSource

    require_java()
    # Python workers must run the interpreter that has txmq installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    chosen = master or "local[*]"
    builder = (
        SparkSession.builder.master(chosen)
        .appName("txmq-audit")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.extraJavaOptions", UTC_JAVA_OPTION)
        .config("spark.executor.extraJavaOptions", UTC_JAVA_OPTION)
    )
    if chosen.startswith("local"):
        # A few shuffle partitions per core; Spark's default of 200 is sized for a cluster.
        builder = builder.config("spark.sql.shuffle.partitions", str(4 * (os.cpu_count() or 1)))
    if jars:
        builder = builder.config("spark.jars", ",".join(str(p.resolve()) for p in jars))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(TxmqDataSource)
    return spark


def _remote_session(remote: str, jars: Sequence[Path]) -> Any:
    if not remote.startswith("sc://"):
        raise AuditInputError(
            f"--remote must be a Spark Connect URL sc://HOST:PORT, got {remote!r}"
        )
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.remote(remote).getOrCreate()
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    if jars:
        spark.addArtifacts(*(str(p) for p in jars))
    return spark
