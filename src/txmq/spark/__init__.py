"""The PySpark connector: the ``txmq`` data source (source.py, sink.py), its gRPC client
(client.py), the cluster's members and replicas (members.py, addresses.py), option parsing
(options.py), Arrow conversion (arrow.py, columnar.py), and the session helpers that check what
Spark needs from the machine (session.py). No logic here."""
