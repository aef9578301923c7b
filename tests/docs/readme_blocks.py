"""README.md's fenced code blocks, as the README test runs them.

A block is a fence whose language is ``sh``, ``python`` or ``js`` (other fences, such as
``text``, are not run). It belongs to the nearest ``## `` heading above it, and may carry a
directive in an HTML comment on the non-blank line just before its fence:

- ``<!-- readme-test: server PORT... -->``: a long-running process (a broker, a cluster, Spark's
  master). The test starts it in the background, counts it ready once every PORT accepts TCP,
  and stops it (SIGTERM to its process group) when its section is done.
- ``<!-- readme-test: server PORT...; needs etcd -->``: the same, run only where etcd is (or
  can be) installed.
- ``<!-- readme-test: node-install -->``: the npm install of the Node.js client, which the test
  does once into a cache shared with tests/integration/test_node_client.py.

The one rewrite applied to a block is :meth:`Ports.rewrite`: every port the README names
(7077, 8080-8099, 15002) moves by one offset, chosen so that every moved port is free here.
One offset keeps consecutive ports consecutive (``cluster up --port P`` uses P, P+1, ...). The
CLI's default endpoint (127.0.0.1:8081, which the README's commands rely on) moves with them:
the test sets TXMQ_ENDPOINTS to the moved address.
Data directories are relative (``txmq-data/...``), so the test's working directory holds them.
"""

from __future__ import annotations

import random
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Final

README: Final = Path(__file__).parents[2] / "README.md"
RUN_LANGUAGES: Final = ("sh", "python", "js")
PORT_PATTERN: Final = re.compile(r"(?<![\d.])(7077|80[89]\d|15002)(?!\d)")
OFFSET_TRIES: Final = 200

_FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.M | re.S)
_DIRECTIVE = re.compile(r"<!-- readme-test: (.*?) -->\s*$")


@dataclass(frozen=True)
class Block:
    section: str  # the text of the nearest "## " heading above the block
    language: str
    code: str
    directive: str  # "" when none

    @property
    def server_ports(self) -> list[int]:
        if not self.directive.startswith("server "):
            return []
        spec = self.directive.removeprefix("server ").split(";")[0]
        return [int(p) for p in spec.split()]

    @property
    def needs_etcd(self) -> bool:
        return "needs etcd" in self.directive

    @property
    def script_name(self) -> str:
        """A python or js block's file name: the first comment line's first word."""
        first = self.code.splitlines()[0]
        found = re.match(r"(?:#|//)\s*([\w.-]+\.(?:py|js)):", first)
        assert found, f"a {self.language} block must open with '# NAME.py: ...': {first!r}"
        return found.group(1)


def blocks(text: str) -> list[Block]:
    out = []
    for fence in _FENCE.finditer(text):
        language, code = fence.group(1), fence.group(2)
        if language not in RUN_LANGUAGES:
            continue
        before = text[: fence.start()]
        headings = re.findall(r"^## (.+)$", before, re.M)
        assert headings, "a README block sits above every heading"
        last_line = before.rstrip("\n").rsplit("\n", 1)[-1]
        directive = _DIRECTIVE.search(last_line)
        out.append(Block(headings[-1], language, code, directive.group(1) if directive else ""))
    return out


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class Ports:
    """Moves every README port by one offset at which all of them are free on this machine."""

    def __init__(self, text: str, rng: random.Random) -> None:
        named = sorted({int(p) for p in PORT_PATTERN.findall(text)})
        for _ in range(OFFSET_TRIES):
            offset = rng.randrange(10_000, 45_000)
            if all(_free(p + offset) for p in named):
                self.offset = offset
                return
        raise RuntimeError(f"no offset found at which ports {named} are all free")

    def rewrite(self, code: str) -> str:
        return PORT_PATTERN.sub(lambda m: str(int(m.group(1)) + self.offset), code)

    def port(self, readme_port: int) -> int:
        return readme_port + self.offset
