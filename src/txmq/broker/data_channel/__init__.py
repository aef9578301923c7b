"""Spark's data channel (``txmq.data.v1.Data``): PullRecords and QueueOffsets for the source,
PrepareBundle for the transactional sink.

May import: state, rpc (and everything below the broker).
"""
