"""``python -m txmq.broker``: the same as ``txmq broker``."""

from txmq.cli.main import main

main(["broker", *__import__("sys").argv[1:]])
