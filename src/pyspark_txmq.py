"""Lets ``format("txmq")`` work in any SparkSession once txmq is installed, with no
``spark.dataSource.register`` call.

PySpark 4 looks for Python data sources itself: on the first data-source call of a session it
imports every top-level module whose name starts with ``pyspark_`` and registers the
``DefaultSource`` it defines under that class's ``name()`` (pyspark/sql/worker/
lookup_data_sources.py). This module is that hook and nothing else; the connector lives in
``txmq.spark``.
"""

from txmq.spark.source import TxmqDataSource as DefaultSource

__all__ = ["DefaultSource"]
