"""The commit log: fixed-size segment files holding every record of every topic.

Owns: segment files and their names (segment.py), the log itself: reserving, writing, reading,
scanning, truncating and deleting segments (commit_log.py), writes staged for the flusher
(staging.py) and the search for a verifiable record where none should be (search.py).
May import: store.files (and txmq.format, model, errors, limits).
"""
