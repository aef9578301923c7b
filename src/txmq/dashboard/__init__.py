"""``txmq dashboard``: a web UI over the broker's admin channel (see command.py and app.py)."""
