"""The producer side: SendMessage and EndTransaction from request to durable reply, the send path
below gRPC, delay messages, and the transaction check-back loop.

May import: metrics, rpc, topics. Must not import consume.
"""
