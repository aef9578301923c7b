"""The PySpark connector: the ``txmq`` data source (source.py, sink.py), its gRPC client
(client.py), option parsing (options.py), Arrow conversion (arrow.py), a local session helper
(session.py) and the example pipelines (pipeline.py). No logic here."""
