"""The ACL: users, their secrets and their rights, parsed from TOML text. Pure.

Owns: the model (``User``, ``Acl``), name patterns, and turning the text of an ACL file into an
``Acl`` or one ConfigError line naming the file and the key at fault. Reading the file and its
permission check live in txmq/broker/security/auth.py.
Must not: read files or clocks, or put a secret into an error message.

File format (docs/security.md)::

    [[users]]
    access_key = "orders-app"
    secret_key = "..."                 # at least SECRET_KEY_LENGTH_MIN characters
    publish = ["orders", "audit-*"]    # topics it may send to and decide transactions on
    subscribe = ["orders"]             # topics it may receive from
    groups = ["inventory"]             # consumer groups it may use
    admin = false                      # the admin channel: topics, txn resolve, lookups

A pattern is a topic or group name in which ``*`` stands for any run of characters (``*`` alone
matches every name). Names use RocketMQ's characters: letters, digits, ``_``, ``-``, ``%``,
``|``. Every right is empty by default.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from txmq import limits
from txmq.errors import ConfigError
from txmq.protocol.auth import ACCESS_KEY_PATTERN

USER_KEYS: Final = frozenset(
    {"access_key", "secret_key", "publish", "subscribe", "groups", "admin"}
)
_PATTERN_TEXT: Final = re.compile(r"[A-Za-z0-9_%|*-]+")
_NOTHING: Final = re.compile(r"(?!)")  # matches no name


@dataclass(frozen=True)
class Names:
    """A set of name patterns, compiled into one regular expression."""

    patterns: tuple[str, ...]
    regex: re.Pattern[str]

    def allows(self, name: str) -> bool:
        return self.regex.fullmatch(name) is not None


def compile_names(patterns: Iterable[str]) -> Names:
    """Compile patterns already checked by ``_patterns``."""
    kept = tuple(patterns)
    if not kept:
        return Names(kept, _NOTHING)
    parts = [".*".join(re.escape(piece) for piece in p.split("*")) for p in kept]
    return Names(kept, re.compile("|".join(f"(?:{part})" for part in parts)))


@dataclass(frozen=True)
class User:
    access_key: str
    # Kept out of repr so a logged User never shows it.
    secret_key: str
    publish: Names
    subscribe: Names
    groups: Names
    admin: bool

    def __repr__(self) -> str:
        return f"User({self.access_key!r}, admin={self.admin})"


@dataclass(frozen=True)
class Acl:
    users: Mapping[str, User]

    def user(self, access_key: str) -> User | None:
        return self.users.get(access_key)


def _patterns(value: Any, where: str) -> Names:
    if not isinstance(value, list):
        raise ConfigError(f"{where}: expected a list of names or patterns")
    if len(value) > limits.ACL_PATTERNS_PER_USER_MAX:
        raise ConfigError(f"{where}: more than {limits.ACL_PATTERNS_PER_USER_MAX} patterns")
    for item in value:
        if not isinstance(item, str):
            raise ConfigError(f"{where}: expected a list of strings, got {item!r}")
        too_long = len(item) > limits.GROUP_NAME_LENGTH_MAX
        if too_long or _PATTERN_TEXT.fullmatch(item) is None or "**" in item:
            raise ConfigError(
                f"{where}: malformed pattern {item!r} (letters, digits, _ - % | and * only)"
            )
    return compile_names(value)


def _user(table: Any, where: str) -> User:
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: expected a table ([[users]])")
    for key in table:
        if key not in USER_KEYS:
            raise ConfigError(
                f"{where}.{key}: unknown key (expected {', '.join(sorted(USER_KEYS))})"
            )
    access_key = table.get("access_key")
    if not isinstance(access_key, str) or ACCESS_KEY_PATTERN.fullmatch(access_key) is None:
        raise ConfigError(
            f"{where}.access_key: required; 1..{limits.ACCESS_KEY_LENGTH_MAX} of "
            "letters, digits and _ . @ : / + -"
        )
    secret = table.get("secret_key")
    low, high = limits.SECRET_KEY_LENGTH_MIN, limits.SECRET_KEY_LENGTH_MAX
    if not isinstance(secret, str) or not low <= len(secret) <= high:
        raise ConfigError(f"{where}.secret_key: required; a string of {low}..{high} characters")
    admin = table.get("admin", False)
    if not isinstance(admin, bool):
        raise ConfigError(f"{where}.admin: expected true or false")
    return User(
        access_key=access_key,
        secret_key=secret,
        publish=_patterns(table.get("publish", []), f"{where}.publish"),
        subscribe=_patterns(table.get("subscribe", []), f"{where}.subscribe"),
        groups=_patterns(table.get("groups", []), f"{where}.groups"),
        admin=admin,
    )


def parse_acl(text: str, source: str) -> Acl:
    """Parse the text of an ACL file; ``source`` (its path) starts every error message.

    Raises:
        ConfigError: not TOML, an unknown key, a malformed pattern or access key, a short
            secret, a duplicate access key, too many users.
    """
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: not valid TOML: {exc}") from exc
    for key in raw:
        if key != "users":
            raise ConfigError(f"{source}: {key}: unknown key (expected [[users]] tables)")
    tables = raw.get("users", [])
    if not isinstance(tables, list):
        raise ConfigError(f"{source}: users: expected [[users]] tables")
    if len(tables) > limits.ACL_USERS_MAX:
        raise ConfigError(f"{source}: users: more than {limits.ACL_USERS_MAX} users")
    users: dict[str, User] = {}
    for i, table in enumerate(tables):
        user = _user(table, f"{source}: users[{i}]")
        if user.access_key in users:
            raise ConfigError(f"{source}: users[{i}].access_key: {user.access_key!r} appears twice")
        users[user.access_key] = user
    return Acl(users)
