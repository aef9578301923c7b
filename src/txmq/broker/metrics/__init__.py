"""The broker's Prometheus metrics, in a registry of its own per broker.

May import: nothing else of the broker.
"""
