"""The topic registry: names, queue counts and message types, persisted in ``topics.json``.

May import: nothing else of the broker.
"""
