"""The consumer side: ReceiveMessage, AckMessage, ChangeInvisibleDuration, the dead-letter queue,
consumer positions and their file, the delivery book, receipt handles, tag filters, flow
control and lag.

May import: cluster, config, metrics, rpc, topics. Must not import produce.
"""
