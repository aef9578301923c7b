"""Cluster membership: which brokers serve which topics, their liveness probes, and the routes
(QueryRoute, QueryAssignment) built from them. The cluster file and etcd keys it reads live in
txmq.coordination, below the broker and the CLI.

May import: topics (and everything below the broker).
"""
