"""Leadership of a replica group: the sans-I/O election and in-sync set, its driver against
etcd, the lease keepalive thread, and the hand-back to the preferred replica.

May import: nothing else of the broker (etcd and its keys: txmq.coordination).
"""
