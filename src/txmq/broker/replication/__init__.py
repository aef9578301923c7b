"""Replication of a group's commit log: the leader's Replica channel and in-sync acks, the
plain-TCP fetch wire, a follower's link to its leader, the follower itself, and forwarding
client calls from a follower to its leader.

May import: cluster, config, consume, leadership, produce, rpc, topics.
"""
