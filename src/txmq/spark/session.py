"""A local Spark session with the txmq data source registered, and a clear Java check."""

from __future__ import annotations

import os
import shutil
import sys
from typing import Any

from txmq.errors import ConfigError


def require_java() -> None:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise ConfigError(
            "Spark needs Java 17+: install a JDK (e.g. openjdk-17-jre) or set "
            "JAVA_HOME; only the Spark connector needs it"
        )


def local_session(app: str = "txmq", cores: int = 2) -> Any:
    require_java()
    # Python workers must run the interpreter that has txmq installed, not whatever
    # "python3" is first on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from txmq.spark.source import TxmqDataSource

    spark = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(TxmqDataSource)
    return spark
