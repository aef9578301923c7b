"""The cluster file: a cluster's name, its groups of replicas and every replica's endpoint, in TOML.

Owns: the ``ClusterFile``/``Group``/``Member`` values, loading them from a file (every problem is
one ``ClusterFileError`` naming the file and the key), writing them (``txmq cluster up`` writes
the file it then starts its brokers with), and finding which replica a starting broker is.
Must not: open sockets or know about topics (membership.py does the talking).

Two forms. The flat one lists brokers; each is a group of one replica named as the broker::

    [cluster]
    name = "local"

    [[broker]]
    name = "broker-0"
    endpoint = "127.0.0.1:8081"

The grouped one lists groups of replicas; one replica of each group leads, through
etcd (``etcd`` here, or ``txmq broker --etcd``, which wins)::

    [cluster]
    name = "local"
    etcd = "127.0.0.1:2379"

    [[group]]
    name = "group-0"
    [[group.replica]]
    name = "replica-0"
    endpoint = "127.0.0.1:8081"
    [[group.replica]]
    name = "replica-1"
    endpoint = "127.0.0.1:8082"

A group's name is the broker name the routes carry (the official clients key queues by broker
name and queue id), whichever replica leads it; a replica's name is what ``--broker-name``
picks and what etcd's leader key holds. Names are unique (a group of one may share its
replica's name: that is the flat form), so are endpoints. The order of the tables is the order
everywhere (routes, assignments, ``cluster status``, the Spark source's queue numbering).
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from txmq import limits
from txmq.errors import ConfigError
from txmq.store.files.disk import FILE_MODE

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class ClusterFileError(ConfigError):
    """A cluster file is unreadable, not TOML, or holds a missing, duplicate or bad value."""


@dataclass(frozen=True, slots=True)
class Member:
    """One broker process: a replica of its group (the only one in the flat form)."""

    name: str
    host: str
    port: int

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class Group:
    """One broker of the cluster as clients see it: its queues, served by whichever of its
    replicas leads (the one replica of a plain broker)."""

    name: str
    replicas: tuple[Member, ...]


def _check_names(groups: tuple[Group, ...]) -> None:
    group_names = [g.name for g in groups]
    if len(set(group_names)) != len(group_names):
        raise ClusterFileError(f"group names must be unique, got {group_names}")
    members = [m for g in groups for m in g.replicas]
    names = [m.name for m in members]
    if len(set(names)) != len(names):
        raise ClusterFileError(f"broker names must be unique, got {names}")
    for g in groups:
        clash = [m.name for h in groups if h != g for m in h.replicas if m.name == g.name]
        if clash:
            raise ClusterFileError(f"group {g.name!r} has the name of a replica of another group")
    endpoints = [m.endpoint for m in members]
    if len(set(endpoints)) != len(endpoints):
        raise ClusterFileError(f"broker endpoints must be unique, got {endpoints}")


@dataclass(frozen=True, slots=True)
class ClusterFile:
    """``members``: every replica, group after group. Without ``groups`` (the flat form) each
    member is a group of one of the same name; with them, ``members`` must be their replicas."""

    name: str
    members: tuple[Member, ...]
    groups: tuple[Group, ...] = ()
    # etcd HOST:PORT the groups are led through; "" when not in the file.
    etcd: str = ""

    def __post_init__(self) -> None:
        if not self.groups:
            object.__setattr__(self, "groups", tuple(Group(m.name, (m,)) for m in self.members))
        if tuple(m for g in self.groups for m in g.replicas) != self.members:
            raise ClusterFileError("members must be the groups' replicas, in order")
        if not 1 <= len(self.members) <= limits.CLUSTER_MEMBERS_MAX:
            raise ClusterFileError(
                f"a cluster has 1..{limits.CLUSTER_MEMBERS_MAX} brokers, got {len(self.members)}"
            )
        for g in self.groups:
            if not 1 <= len(g.replicas) <= limits.REPLICAS_MAX:
                raise ClusterFileError(
                    f"group {g.name!r} has 1..{limits.REPLICAS_MAX} replicas, got {len(g.replicas)}"
                )
        _check_names(self.groups)

    @classmethod
    def of_groups(cls, name: str, groups: tuple[Group, ...], etcd: str = "") -> ClusterFile:
        return cls(name, tuple(m for g in groups for m in g.replicas), groups, etcd)

    @property
    def flat(self) -> bool:
        """Every group is one replica of its own name (what the flat form can write)."""
        return all(len(g.replicas) == 1 and g.replicas[0].name == g.name for g in self.groups)

    @property
    def replicated(self) -> bool:
        """Some group has several replicas: the cluster needs etcd."""
        return any(len(g.replicas) > 1 for g in self.groups)

    def group_of(self, member: Member) -> Group:
        for g in self.groups:
            if member in g.replicas:
                return g
        raise ClusterFileError(f"{member.name!r} is in no group of cluster {self.name!r}")

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


def _name(raw: Any, source: str) -> str:
    if isinstance(raw, str) and len(raw) > 64:
        raise ClusterFileError(f"{source}.name: too long: {len(raw)} characters, at most 64")
    if not isinstance(raw, str) or not NAME_PATTERN.match(raw):
        raise ClusterFileError(
            f"{source}.name: expected 1-64 letters, digits, '_', '.', '-', got {raw!r}"
        )
    return raw


def _member(raw: Any, source: str) -> Member:
    if not isinstance(raw, dict):
        raise ClusterFileError(f"{source}: expected a table with name and endpoint")
    unknown = set(raw) - {"name", "endpoint"}
    if unknown:
        raise ClusterFileError(f"{source}: unknown key {sorted(unknown)[0]}")
    name, endpoint = _name(raw.get("name"), source), raw.get("endpoint")
    if not isinstance(endpoint, str):
        raise ClusterFileError(f"{source}.endpoint: expected HOST:PORT, got {endpoint!r}")
    host, port = parse_endpoint(endpoint, f"{source}.endpoint")
    return Member(name, host, port)


def _group(raw: Any, source: str) -> Group:
    if not isinstance(raw, dict):
        raise ClusterFileError(f"{source}: expected a table with a name and [[group.replica]]")
    unknown = set(raw) - {"name", "replica"}
    if unknown:
        raise ClusterFileError(f"{source}: unknown key {sorted(unknown)[0]}")
    name = _name(raw.get("name"), source)
    replicas = raw.get("replica")
    if not isinstance(replicas, list) or not replicas:
        raise ClusterFileError(f"{source}: expected at least one [[group.replica]] table")
    return Group(
        name,
        tuple(_member(r, f"{source} [[group.replica]] #{i + 1}") for i, r in enumerate(replicas)),
    )


def _cluster_table(raw: Any, path: Path) -> tuple[str, str]:
    """[cluster]: its name and etcd endpoint ("" when absent)."""
    if not isinstance(raw, dict) or "name" not in raw or set(raw) - {"name", "etcd"}:
        raise ClusterFileError(f"{path}: expected a [cluster] table with a name (and etcd)")
    name = raw["name"]
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise ClusterFileError(f"{path}: [cluster].name: expected a name, got {name!r}")
    etcd = raw.get("etcd", "")
    if not isinstance(etcd, str):
        raise ClusterFileError(f"{path}: [cluster].etcd: expected HOST:PORT, got {etcd!r}")
    if etcd:
        parse_endpoint(etcd, f"{path}: [cluster].etcd")
    return name, etcd


def parse(text: str, path: Path) -> ClusterFile:
    """Parse a cluster file's text; ``path`` only names it in errors."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ClusterFileError(f"{path}: not valid TOML: {exc}") from exc
    unknown = set(raw) - {"cluster", "broker", "group"}
    if unknown:
        raise ClusterFileError(f"{path}: unknown section [{sorted(unknown)[0]}]")
    name, etcd = _cluster_table(raw.get("cluster"), path)
    brokers, groups = raw.get("broker"), raw.get("group")
    if brokers is not None and groups is not None:
        raise ClusterFileError(f"{path}: use [[broker]] or [[group]] tables, not both")
    try:
        if groups is not None:
            if not isinstance(groups, list) or not groups:
                raise ClusterFileError("expected at least one [[group]] table")
            found = tuple(_group(g, f"[[group]] #{i + 1}") for i, g in enumerate(groups))
            return ClusterFile.of_groups(name, found, etcd)
        if not isinstance(brokers, list) or not brokers:
            raise ClusterFileError("expected at least one [[broker]] table")
        members = tuple(_member(b, f"[[broker]] #{i + 1}") for i, b in enumerate(brokers))
        return ClusterFile(name, members, etcd=etcd)
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
    """The file's text (the flat form when it can say it all); ``parse(render(c)) == c``."""
    lines = ["[cluster]", f'name = "{cluster.name}"']
    if cluster.etcd:
        lines.append(f'etcd = "{cluster.etcd}"')
    if cluster.flat:
        for m in cluster.members:
            lines += ["", "[[broker]]", f'name = "{m.name}"', f'endpoint = "{m.endpoint}"']
        return "\n".join(lines) + "\n"
    for g in cluster.groups:
        lines += ["", "[[group]]", f'name = "{g.name}"']
        for m in g.replicas:
            lines += ["[[group.replica]]", f'name = "{m.name}"', f'endpoint = "{m.endpoint}"']
    return "\n".join(lines) + "\n"


def write(path: Path, cluster: ClusterFile) -> None:
    """Write the file whole: a temporary file renamed over the old one, owner only (0600, as
    the data beside it in ``txmq cluster up``'s directory)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    with os.fdopen(fd, "w") as out:
        os.fchmod(fd, FILE_MODE)  # whatever the umask, or a temporary file a crash left
        out.write(render(cluster))
    tmp.replace(path)
