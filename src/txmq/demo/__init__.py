"""The order/inventory demo (the seeds\x27 story), used by ``txmq demo`` and examples/."""
