"""Recovery and repair: bringing the log and its derived data back to one consistent state.

Owns: recovery at open (recover.py: torn tail cut, mid-log corruption refused, derived data
re-dispatched from the checkpoint) and repair while running (repair.py: the resilient log walk,
queue and index rebuilds, the background scrub). May import: store.derived, store.log,
store.files, store.health.
"""
