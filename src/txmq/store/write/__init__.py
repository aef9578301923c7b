"""The write path: how records enter the log and become durable.

Owns: ``WritePath`` (write_path.py: the writer lock, queue offsets, placing a batch, a
replica's verbatim write), the group commit (group_commit.py: one fsync for many writers, the
flusher thread, fencing) and the disk watermark (watermark.py). May import: store.derived,
store.log, store.files, store.config.
"""
