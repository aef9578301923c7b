"""A local Spark session with the txmq data source registered, and clear checks of what Spark
needs from the machine.

Owns: finding Java 17+ (Spark 4 needs it); checking that the interpreter Spark's Python workers
run can import txmq, and explaining Spark's ``DATA_SOURCE_NOT_FOUND`` for ``txmq`` (PySpark looks
data sources up in a Python worker, which runs ``PYSPARK_PYTHON`` or the first ``python3`` on
PATH, not necessarily the driver's interpreter); each as one actionable line. Also the small
local session the examples, tests and benchmark use. Must not: be needed for
``format("txmq")``: any session finds the source through the top-level ``pyspark_txmq`` module
(registering explicitly here also serves PySpark builds without that discovery).
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
# Importing pyspark, pyarrow and txmq in a fresh interpreter takes seconds on a loaded machine.
WORKER_PROBE_TIMEOUT_S: Final = 120
# What PySpark runs for its Python workers when neither PYSPARK_PYTHON nor
# spark.pyspark.python says otherwise.
WORKER_PYTHON_DEFAULT: Final = "python3"
# The modules a worker imports to find and run the data source.
WORKER_IMPORTS: Final = "import pyspark_txmq, txmq.spark.source"


# Spark's answer for a data source no worker knows, naming txmq itself (not "txmq-other").
_TXMQ_NOT_FOUND: Final = re.compile(r"DATA_SOURCE_NOT_FOUND\].*data source: `?txmq`?(?![\w-])")
# The last line of a txmq error's traceback, as Spark quotes it inside its own error.
_TXMQ_ERROR_LINE: Final = re.compile(r"^txmq\.[\w.]*Error: (.+)$", re.M)


class JavaMissingError(ConfigError):
    """No usable Java for Spark: not installed, not on PATH/JAVA_HOME, or older than 17."""


class DataSourceMissingError(ConfigError):
    """Spark's Python workers cannot import txmq, so ``format("txmq")`` is unknown to them."""


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


def worker_python(*, driver: bool = False) -> str:
    """The interpreter local Spark workers run: ``PYSPARK_PYTHON``, else ``python3`` as PATH
    resolves it (the name itself when PATH has none). ``driver``: the workers that plan on the
    driver, where PySpark looks data sources up, which ``PYSPARK_DRIVER_PYTHON`` overrides."""
    names = [os.environ.get("PYSPARK_DRIVER_PYTHON")] if driver else []
    name = next(n for n in [*names, os.environ.get("PYSPARK_PYTHON"), WORKER_PYTHON_DEFAULT] if n)
    return shutil.which(name) or name


def missing_source_hint(python: str) -> str:
    """The one line that names why a Spark session lacks ``txmq`` and how to fix it."""
    return (
        f"Spark's Python workers run {python}, which cannot import txmq: activate the venv "
        f"that has txmq, or set PYSPARK_PYTHON={sys.executable} (on a cluster or a Spark "
        "Connect server: install txmq[spark] for the interpreter its executors run)"
    )


def require_worker_python(python: str | None = None) -> None:
    """Raises DataSourceMissingError unless ``python`` (default: worker_python()) imports txmq's
    data source, which is what Spark's workers must do for ``format("txmq")``."""
    python = python or worker_python()
    try:
        probe = subprocess.run(
            [python, "-c", WORKER_IMPORTS],
            capture_output=True,
            text=True,
            timeout=WORKER_PROBE_TIMEOUT_S,
        )
    except OSError as exc:
        raise DataSourceMissingError(f"{missing_source_hint(python)} ({exc.strerror})") from exc
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["no output"])[-1]
        raise DataSourceMissingError(f"{missing_source_hint(python)} ({last})")


def explain(exc: BaseException) -> DataSourceMissingError | None:
    """Spark's ``DATA_SOURCE_NOT_FOUND`` for ``txmq`` as one line naming the cause and the fix;
    None for any other error."""
    if _TXMQ_NOT_FOUND.search(str(exc)) is None:
        return None
    return DataSourceMissingError(
        f"this Spark session does not know format('txmq') (DATA_SOURCE_NOT_FOUND): "
        f"{missing_source_hint(worker_python(driver=True))}"
    )


def txmq_cause(exc: BaseException) -> str | None:
    """The txmq error inside an error Spark raised (a data source's reader or writer failed in
    a Python worker, and Spark wrapped its traceback): that error's one line, or None."""
    found = _TXMQ_ERROR_LINE.findall(str(exc))
    return found[-1] if found else None


def check_data_source(spark: Any) -> None:
    """Asks ``spark`` (any session: local, a cluster's, Spark Connect) to resolve the txmq data
    source, and raises DataSourceMissingError with the cause and the fix when it cannot. Only
    the schema is resolved: no broker is called."""
    try:
        spark.read.format("txmq").load().schema  # noqa: B018  (resolving is the check)
    except Exception as exc:  # a py4j or Spark Connect error, typed by their packages
        explained = explain(exc)
        if explained is None:
            raise
        raise explained from None


def local_session(app: str = "txmq", cores: int = 2, **conf: str) -> Any:
    """A ``local[cores]`` SparkSession (UI off, UTC, few shuffle partitions) with the txmq data
    source registered. Extra Spark settings come as ``conf`` (dots as given).

    Raises:
        JavaMissingError: no Java 17+.
        DataSourceMissingError: PYSPARK_PYTHON names an interpreter without txmq.
    """
    require_java()
    # Python workers must run the interpreter that has txmq installed, not whatever "python3"
    # is first on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if os.environ["PYSPARK_PYTHON"] != sys.executable:
        require_worker_python(os.environ["PYSPARK_PYTHON"])
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
