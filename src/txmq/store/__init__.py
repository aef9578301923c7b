"""The store: one commit log for every topic, the consume queues and the index derived from it,
group commit, recovery, and what a replica keeps beside its log.

Rooms, top to bottom (pyproject's import-linter contract "store rooms" enforces the order; a
room imports only rooms below it, "|" siblings not each other):
replica; store (the façade, ``Store``); retention | write | recovery; derived; log;
files | config | health.
"""
