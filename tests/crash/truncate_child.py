"""Child process for the truncation crash test: cut a closed store, SIGKILL itself after a step.

Usage: truncate_child.py STORE_DIR OFFSET STEP
(STEP is one of store/replica/truncate.py's step names: marked, checkpoint, log, epochs)
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from tests.conftest import SMALL
from txmq.store.files.disk import OsDisk
from txmq.store.replica.truncate import truncate_closed


def main() -> None:
    store_dir, offset, step = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]

    def after(name: str) -> None:
        if name == step:
            os.kill(os.getpid(), signal.SIGKILL)

    truncate_closed(store_dir, SMALL, offset, OsDisk(), after_step=after)
    sys.exit(3)  # never reached: the kill comes first


if __name__ == "__main__":
    main()
