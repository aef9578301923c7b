"""Peers for benchmarks/compare.py: each starts its own server on 127.0.0.1 in a temporary
directory, runs the shared workload, and stops it."""
