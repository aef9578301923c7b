"""A local Spark session with the txmq data source registered, and a clear Java check.

Owns: finding Java 17+ (Spark 4 needs it) and failing with one actionable message when it is
missing, and the small local session the examples, tests and benchmark use. Must not: be needed
for ``format("txmq")``: any session finds the source through the top-level ``pyspark_txmq``
module (registering explicitly here also serves PySpark builds without that discovery).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Final

from txmq.errors import ConfigError

JAVA_MAJOR_MIN: Final = 17
JAVA_PROBE_TIMEOUT_S: Final = 30


class JavaMissingError(ConfigError):
    """No usable Java for Spark: not installed, not on PATH/JAVA_HOME, or older than 17."""


def java_binary() -> Path:
    home = os.environ.get("JAVA_HOME")
    if home:
        path = Path(home) / "bin" / "java"
        if not path.exists():
            raise JavaMissingError(f"JAVA_HOME={home} has no bin/java; fix or unset JAVA_HOME")
        return path
    found = shutil.which("java")
    if found is None:
        raise JavaMissingError(
            f"Spark needs Java {JAVA_MAJOR_MIN}+ and none was found: install a JDK "
            "(e.g. apt-get install openjdk-17-jre-headless) or set JAVA_HOME. Only the Spark "
            "connector needs Java; the broker does not."
        )
    return Path(found)


def java_major(version_output: str) -> int:
    """The major version from ``java -version`` output ("1.8.0_x" is 8); 0 if unknown."""
    found = re.search(r'version "(\d+)(?:\.(\d+))?', version_output)
    if found is None:
        return 0
    major = int(found.group(1))
    return int(found.group(2) or 0) if major == 1 else major


def require_java() -> None:
    """Raises JavaMissingError unless a Java 17+ runtime is available."""
    java = java_binary()
    probe = subprocess.run(
        [str(java), "-version"], capture_output=True, text=True, timeout=JAVA_PROBE_TIMEOUT_S
    )
    major = java_major(probe.stderr + probe.stdout)
    if major < JAVA_MAJOR_MIN:
        raise JavaMissingError(
            f"Spark needs Java {JAVA_MAJOR_MIN}+, found Java {major or '?'} at {java}: install a "
            "newer JDK or point JAVA_HOME at one"
        )


def local_session(app: str = "txmq", cores: int = 2, **conf: str) -> Any:
    """A ``local[cores]`` SparkSession (UI off, UTC, few shuffle partitions) with the txmq data
    source registered. Extra Spark settings come as ``conf`` (dots as given)."""
    require_java()
    # Python workers must run the interpreter that has txmq installed, not whatever "python3"
    # is first on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from txmq.spark.source import TxmqDataSource

    builder = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(max(2, cores)))
        .config("spark.sql.session.timeZone", "UTC")
    )
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(TxmqDataSource)
    return spark
