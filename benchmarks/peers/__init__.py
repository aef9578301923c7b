"""Peers for benchmarks/compare.py: one module per system with start/prepare/Producer/consume
(the contract is in _base.py), the phase driver and the report."""
