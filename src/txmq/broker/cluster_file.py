"""The cluster file: a cluster's name and every member broker's name and endpoint, in TOML.

Owns: the ``ClusterFile``/``Member`` values, loading them from a file (every problem is one
``ClusterFileError`` naming the file and the key), writing them (``txmq cluster up`` writes the
file it then starts its brokers with), and finding which member a starting broker is.
Must not: open sockets or know about topics (membership.py does the talking).

Format::

    [cluster]
    name = "local"

    [[broker]]
    name = "broker-0"
    endpoint = "127.0.0.1:8081"

    [[broker]]
    name = "broker-1"
    endpoint = "127.0.0.1:8082"

Names are the broker names the routes carry (the official clients key queues by broker name and
queue id), so they must be unique; so must endpoints. The order of the ``[[broker]]`` tables is
the order of the members everywhere (routes, assignments, ``cluster status``).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from txmq import limits
from txmq.errors import ConfigError

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class ClusterFileError(ConfigError):
    """A cluster file is unreadable, not TOML, or holds a missing, duplicate or bad value."""


@dataclass(frozen=True)
class Member:
    name: str
    host: str
    port: int

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class ClusterFile:
    name: str
    members: tuple[Member, ...]

    def __post_init__(self) -> None:
        if not 1 <= len(self.members) <= limits.CLUSTER_MEMBERS_MAX:
            raise ClusterFileError(
                f"a cluster has 1..{limits.CLUSTER_MEMBERS_MAX} brokers, got {len(self.members)}"
            )
        names = [m.name for m in self.members]
        if len(set(names)) != len(names):
            raise ClusterFileError(f"broker names must be unique, got {names}")
        endpoints = [m.endpoint for m in self.members]
        if len(set(endpoints)) != len(endpoints):
            raise ClusterFileError(f"broker endpoints must be unique, got {endpoints}")

    def member(self, name: str) -> Member:
        for m in self.members:
            if m.name == name:
                return m
        raise ClusterFileError(
            f"no broker named {name!r} in cluster {self.name!r} "
            f"(members: {', '.join(m.name for m in self.members)})"
        )

    def find_self(self, *, name: str, host: str, port: int) -> Member:
        """The member a starting broker is: by name when given, else by its endpoint."""
        if name:
            return self.member(name)
        hits = [m for m in self.members if m.port == port and m.host == host]
        if len(hits) != 1:
            raise ClusterFileError(
                f"cannot tell which broker of cluster {self.name!r} this is: no member has "
                f"endpoint {host}:{port} (give --broker-name)"
            )
        return hits[0]


def parse_endpoint(text: str, source: str) -> tuple[str, int]:
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ClusterFileError(f"{source}: expected HOST:PORT with a port 1..65535, got {text!r}")
    return host, int(port)


def _member(raw: Any, source: str) -> Member:
    if not isinstance(raw, dict):
        raise ClusterFileError(f"{source}: expected a table with name and endpoint")
    unknown = set(raw) - {"name", "endpoint"}
    if unknown:
        raise ClusterFileError(f"{source}: unknown key {sorted(unknown)[0]}")
    name, endpoint = raw.get("name"), raw.get("endpoint")
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise ClusterFileError(
            f"{source}.name: expected 1-64 letters, digits, '_', '.', '-', got {name!r}"
        )
    if not isinstance(endpoint, str):
        raise ClusterFileError(f"{source}.endpoint: expected HOST:PORT, got {endpoint!r}")
    host, port = parse_endpoint(endpoint, f"{source}.endpoint")
    return Member(name, host, port)


def parse(text: str, path: Path) -> ClusterFile:
    """Parse a cluster file's text; ``path`` only names it in errors."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ClusterFileError(f"{path}: not valid TOML: {exc}") from exc
    unknown = set(raw) - {"cluster", "broker"}
    if unknown:
        raise ClusterFileError(f"{path}: unknown section [{sorted(unknown)[0]}]")
    cluster = raw.get("cluster")
    if not isinstance(cluster, dict) or set(cluster) != {"name"}:
        raise ClusterFileError(f"{path}: expected a [cluster] table with only a name")
    name = cluster["name"]
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise ClusterFileError(f"{path}: [cluster].name: expected a name, got {name!r}")
    brokers = raw.get("broker")
    if not isinstance(brokers, list) or not brokers:
        raise ClusterFileError(f"{path}: expected at least one [[broker]] table")
    members = tuple(_member(b, f"{path}: [[broker]] #{i + 1}") for i, b in enumerate(brokers))
    try:
        return ClusterFile(name, members)
    except ClusterFileError as exc:
        raise ClusterFileError(f"{path}: {exc}") from exc


def load(path: Path) -> ClusterFile:
    """Read and check a cluster file.

    Raises:
        ClusterFileError: unreadable, not TOML, or a missing, unknown, duplicate or bad value.
    """
    try:
        text = path.read_text()
    except OSError as exc:
        raise ClusterFileError(f"cannot read cluster file {path}: {exc.strerror or exc}") from exc
    return parse(text, path)


def render(cluster: ClusterFile) -> str:
    """The file's text; ``parse(render(c)) == c``."""
    lines = ["[cluster]", f'name = "{cluster.name}"']
    for m in cluster.members:
        lines += ["", "[[broker]]", f'name = "{m.name}"', f'endpoint = "{m.endpoint}"']
    return "\n".join(lines) + "\n"


def write(path: Path, cluster: ClusterFile) -> None:
    """Write the file whole: a temporary file renamed over the old one."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(render(cluster))
    tmp.replace(path)
