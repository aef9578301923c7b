"""txmq."""
