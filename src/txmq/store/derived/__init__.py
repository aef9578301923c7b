"""Derived data: the consume queues and the message index built from the log, and reading
through them.

Owns: queue files (consume_queue.py), the index (index.py), the dispatcher that keeps both and
answers queries on them (dispatch.py), reads by queue, key and message id (reader.py), the last
queue records as written (recent.py), the checkpoint file and abort marker (checkpoint.py) and
taking checkpoints (checkpointer.py). May import: store.log, store.files, store.health.
"""
