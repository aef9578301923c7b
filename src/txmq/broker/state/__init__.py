"""The broker's state opened from its data directory: the store, topics, consumer positions, the
send path, delays, lag and metrics, opened together (``Parts``) and closed in order, and the
lock on the directory.

May import: config, consume, metrics, produce, rpc, topics.
"""
