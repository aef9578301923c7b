"""What the store does and keeps for replication.

Owns: log shipping and a follower's verbatim append (shipping.py), the read hold that keeps
records from readers until the in-sync replicas have them (hold.py), the files a replica keeps
beside its log: the acknowledged end (acked.py), the leader-epoch history (epochs.py) and the
data directory's incarnation (identity.py), and cutting a closed store back to an offset
(truncate.py). May import: every other room of the store. Must not: know about leaders'
elections, etcd or the network (broker/replication and broker/leadership do).
"""
