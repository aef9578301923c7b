"""``python -m txmq.broker``: start one broker; the same flags as ``txmq broker``.

Runs the ``broker`` click command (txmq/broker/node/command.py) alone, without the rest of the CLI,
so a broker starts even while other commands (demo, Spark helpers) are broken or missing
dependencies. Prints ``txmq broker listening on HOST:PORT`` once it accepts RPCs (tests read
the port from it when started with ``--port 0``); SIGINT/SIGTERM shut it down cleanly.
"""

import sys

from txmq.broker.node.command import broker
from txmq.errors import TxmqError
from txmq.exits import EXIT_FAILED

try:
    broker.main(args=sys.argv[1:], prog_name="python -m txmq.broker", standalone_mode=True)
except (TxmqError, OSError) as exc:  # e.g. a fenced store, a port in use: one line, exit 1
    print(f"txmq broker: {exc}", file=sys.stderr, flush=True)
    sys.exit(EXIT_FAILED)
