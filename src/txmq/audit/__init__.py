"""``txmq audit``: a Spark job that checks a database table and a topic agree (lost rows,
phantom messages, duplicate keys, transactions still open). See docs/audit.md."""
