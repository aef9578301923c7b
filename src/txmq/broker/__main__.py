"""``python -m txmq.broker``: the same as ``txmq broker``."""

import sys

from txmq.cli.main import main

main(["broker", *sys.argv[1:]])
