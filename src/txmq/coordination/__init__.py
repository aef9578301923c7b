"""What the broker and the CLI both need to coordinate brokers: the cluster file, an etcd client,
a local etcd for tests and ``cluster up``, and the etcd keys of replica groups with their codecs.

May import: store (epoch histories), model, errors, limits.
"""
