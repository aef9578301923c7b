"""What the client-side commands share below cli/, dashboard/ and demo/: the admin channel
client (admin.py) and the client commands' security options (security.py). The credentials,
TLS and channel construction every client uses, Spark's too, stay in protocol/client_security.py.
"""
