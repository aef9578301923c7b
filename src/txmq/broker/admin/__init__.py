"""The admin channel (``txmq.admin.v1.Admin``, JSON bodies): topics, transactions, groups,
messages, the dashboard's views, and the cluster-wide admin methods.

May import: state, cluster, topics, rpc (and everything below the broker).
"""
