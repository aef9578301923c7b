"""Who may do what: the ACL file and signature checks, the interceptor every call passes, TLS
credentials, and which cluster member a peer's client certificate names.

May import: cluster, config, leadership, rpc.
"""
