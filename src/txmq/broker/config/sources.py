"""Configuration loading: defaults < TOML file < ``TXMQ_*`` environment variables < flags.

Owns: turning those sources into one validated BrokerConfig. Every bad value is refused with a
ConfigError naming where it came from (``broker.toml: [broker].port``, ``TXMQ_PORT``,
``--port``) and what is accepted; unknown TOML sections and keys are refused too, so a typo in
the file never silently falls back to a default. The reference is docs/configuration.md.
Must not: hold defaults of its own (they live in BrokerConfig and StoreConfig).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from txmq.broker.config.broker_config import BrokerConfig
from txmq.errors import ConfigError
from txmq.model import FlushMode
from txmq.store.config import StoreConfig

# Field name -> declared type (as written in the dataclass), per section.
BROKER_FIELDS = {f.name: str(f.type) for f in fields(BrokerConfig) if f.name != "store"}
STORE_FIELDS = {f.name: str(f.type) for f in fields(StoreConfig)}
# Environment variables that belong to client commands or tests, never to the broker.
ENV_NOT_BROKER = frozenset(
    {
        "TXMQ_ENDPOINTS",
        "TXMQ_SEED",
        "TXMQ_ACCESS_KEY",
        "TXMQ_SECRET_KEY",
        "TXMQ_TLS",
        "TXMQ_CA_FILE",
        "TXMQ_CERT_FILE",
        "TXMQ_KEY_FILE",
    }
)
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def parse_value(kind: str, value: Any, source: str, *, from_text: bool = False) -> Any:
    """Check/convert one value to a field's declared type. Environment text is parsed
    (``from_text``); TOML and flag values must already have the right type."""
    text = from_text and isinstance(value, str)
    try:
        if kind in ("int", "int | None"):
            if text:
                return int(value.strip())
            if isinstance(value, int) and not isinstance(value, bool):
                return value
            raise ValueError("an integer")
        if kind == "float":
            if text:
                return float(value.strip())
            if isinstance(value, int | float) and not isinstance(value, bool):
                return float(value)
            raise ValueError("a number")
        if kind == "bool":
            if isinstance(value, bool):
                return value
            if text and value.strip().lower() in _TRUE + _FALSE:
                return value.strip().lower() in _TRUE
            raise ValueError("true or false")
        if kind == "FlushMode":
            if isinstance(value, FlushMode):
                return value
            return FlushMode(str(value).strip().lower())
        if kind in ("Path", "Path | None"):
            if isinstance(value, Path) or (isinstance(value, str) and value.strip()):
                return Path(value)
            raise ValueError("a path")
        if isinstance(value, str):
            return value
        raise ValueError("a string")
    except ValueError as exc:
        expected = _expected(kind)
        raise ConfigError(f"{source}: expected {expected}, got {value!r}") from exc


def _expected(kind: str) -> str:
    if kind == "FlushMode":
        return " or ".join(repr(m.value) for m in FlushMode)
    return {
        "int": "an integer",
        "int | None": "an integer",
        "float": "a number",
        "bool": "true or false",
        "Path": "a path",
        "Path | None": "a path",
    }.get(kind, "a string")


def _from_file(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    try:
        raw = tomllib.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    broker: dict[str, Any] = {}
    store: dict[str, Any] = {}
    for section, table in raw.items():
        known = {"broker": BROKER_FIELDS, "store": STORE_FIELDS}.get(section)
        if known is None or not isinstance(table, dict):
            raise ConfigError(f"{path}: unknown section [{section}] (expected [broker], [store])")
        out = broker if section == "broker" else store
        for key, value in table.items():
            if key not in known:
                raise ConfigError(f"{path}: unknown key [{section}].{key}")
            out[key] = parse_value(known[key], value, f"{path}: [{section}].{key}")
    return broker, store


def _from_env(environ: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    broker: dict[str, Any] = {}
    store: dict[str, Any] = {}
    for name, value in environ.items():
        if not name.startswith("TXMQ_") or name in ENV_NOT_BROKER:
            continue
        key = name[len("TXMQ_") :].lower()
        if key.startswith("store_") and key[len("store_") :] in STORE_FIELDS:
            field = key[len("store_") :]
            store[field] = parse_value(STORE_FIELDS[field], value, name, from_text=True)
        elif key in BROKER_FIELDS:
            broker[key] = parse_value(BROKER_FIELDS[key], value, name, from_text=True)
        # Other TXMQ_* names are left alone: tools and tests share the prefix
        # (TXMQ_ENDPOINTS, TXMQ_SEED, TXMQ_BENCH_DIR, ...).
    return broker, store


def load_config(
    *, file: Path | None, env: Mapping[str, str], flags: Mapping[str, Any]
) -> BrokerConfig:
    """Merge the sources (flags > env > file > defaults) into a validated BrokerConfig.

    ``flags`` maps field names to values, None meaning "not given".

    Raises:
        ConfigError: a source is unreadable, names an unknown setting or holds a bad value.
    """
    broker, store = _from_file(file) if file is not None else ({}, {})
    env_broker, env_store = _from_env(env)
    broker.update(env_broker)
    store.update(env_store)
    for key, value in flags.items():
        if value is None:
            continue
        flag = "--" + key.replace("_", "-")
        if key in STORE_FIELDS:
            store[key] = parse_value(STORE_FIELDS[key], value, flag)
        elif key in BROKER_FIELDS:
            broker[key] = parse_value(BROKER_FIELDS[key], value, flag)
        else:
            raise ConfigError(f"{flag}: not a broker setting")
    if "data_dir" not in broker:
        raise ConfigError("a data directory is required (--data-dir, TXMQ_DATA_DIR or data_dir)")
    # BrokerConfig and StoreConfig validate ranges and raise ConfigError naming the field.
    return BrokerConfig(store=StoreConfig(**store), **broker)


def env() -> Mapping[str, str]:
    return os.environ
