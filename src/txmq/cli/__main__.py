"""``python -m txmq.cli``: the ``txmq`` command."""

from txmq.cli.main import main

main()
