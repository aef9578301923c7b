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


@dataclass(frozen=True, slots=True)
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


@dataclass(frozen=True, slots=True)
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


@dataclass(frozen=True, slots=True)
class Acl:
    users: Mapping[str, User]

    def user(self, access_key: str) -> User | None:
        return self.users.get(access_key)


def _type_name(value: Any) -> str:
    """How TOML calls the type of ``value``, for "expected X, got Y" messages."""
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}
    names.update({list: "an array", dict: "a table"})
    return names.get(type(value), type(value).__name__)


def _length(text: str, low: int, high: int, where: str, what: str = "characters") -> None:
    """Raises ConfigError saying how long ``text`` is, when it is not ``low``..``high`` long
    (never its content: it may be a secret)."""
    if len(text) < low:
        raise ConfigError(f"{where}: too short: {len(text)} {what}, at least {low}")
    if len(text) > high:
        raise ConfigError(f"{where}: too long: {len(text)} {what}, at most {high}")


def _patterns(value: Any, where: str) -> Names:
    if not isinstance(value, list):
        raise ConfigError(f"{where}: expected a list of names or patterns, got {_type_name(value)}")
    high = limits.ACL_PATTERNS_PER_USER_MAX
    if len(value) > high:
        raise ConfigError(f"{where}: too many patterns: {len(value)}, at most {high}")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise ConfigError(f"{where}[{i}]: expected a string, got {item!r}")
        _length(item, 1, limits.GROUP_NAME_LENGTH_MAX, f"{where}[{i}]")
        if _PATTERN_TEXT.fullmatch(item) is None or "**" in item:
            raise ConfigError(
                f"{where}: malformed pattern {item!r} (letters, digits, _ - % | and * only, no **)"
            )
    return compile_names(value)


def _access_key(value: Any, where: str) -> str:
    if value is None:
        raise ConfigError(f"{where}: required")
    if not isinstance(value, str):
        raise ConfigError(f"{where}: expected a string, got {_type_name(value)}")
    _length(value, 1, limits.ACCESS_KEY_LENGTH_MAX, where)
    if ACCESS_KEY_PATTERN.fullmatch(value) is None:
        raise ConfigError(
            f"{where}: {value!r} holds characters other than letters, digits and _ . @ : / + -"
        )
    return value


def _secret_key(value: Any, where: str) -> str:
    low, high = limits.SECRET_KEY_LENGTH_MIN, limits.SECRET_KEY_LENGTH_MAX
    if value is None:
        raise ConfigError(f"{where}: required (a string of {low}..{high} characters)")
    if not isinstance(value, str):
        raise ConfigError(f"{where}: expected a string, got {_type_name(value)}")
    _length(value, low, high, where)
    return value


def _user(table: Any, where: str) -> User:
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: expected a table ([[users]])")
    for key in table:
        if key not in USER_KEYS:
            raise ConfigError(
                f"{where}.{key}: unknown key (expected {', '.join(sorted(USER_KEYS))})"
            )
    access_key = _access_key(table.get("access_key"), f"{where}.access_key")
    secret = _secret_key(table.get("secret_key"), f"{where}.secret_key")
    admin = table.get("admin", False)
    if not isinstance(admin, bool):
        raise ConfigError(f"{where}.admin: expected true or false, got {_type_name(admin)}")
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
        raise ConfigError(f"{source}: users: expected [[users]] tables, got {_type_name(tables)}")
    if len(tables) > limits.ACL_USERS_MAX:
        raise ConfigError(
            f"{source}: users: too many users: {len(tables)}, at most {limits.ACL_USERS_MAX}"
        )
    users: dict[str, User] = {}
    for i, table in enumerate(tables):
        user = _user(table, f"{source}: users[{i}]")
        if user.access_key in users:
            raise ConfigError(f"{source}: users[{i}].access_key: {user.access_key!r} appears twice")
        users[user.access_key] = user
    return Acl(users)
