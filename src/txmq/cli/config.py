"""Configuration loading: TOML file < ``TXMQ_*`` environment variables < flags.

Owns: turning those three sources into a validated BrokerConfig, with a clear ConfigError
naming the source and key of a bad value.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from txmq.broker.config import BrokerConfig
from txmq.errors import ConfigError
from txmq.model import FlushMode
from txmq.store.config import StoreConfig

_STORE_KEYS = {f.name for f in fields(StoreConfig)}
_BROKER_KEYS = {f.name for f in fields(BrokerConfig)} - {"store"}


def _coerce(key: str, value: Any, target: Any, source: str) -> Any:
    try:
        if key == "flush_mode":
            return FlushMode(str(value).lower())
        if key == "data_dir":
            return Path(str(value))
        if isinstance(target, bool) or key == "auto_create_topics":
            if isinstance(value, bool):
                return value
            return str(value).lower() in ("1", "true", "yes", "on")
        if isinstance(target, float):
            return float(value)
        if isinstance(target, int) or key in ("metrics_port", "port"):
            return int(value)
        return str(value)
    except ValueError as exc:
        raise ConfigError(f"{source}: bad value for {key}: {value!r}") from exc


def load_config(
    *, file: Path | None, env: Mapping[str, str], flags: Mapping[str, Any]
) -> BrokerConfig:
    values: dict[str, Any] = {}
    store: dict[str, Any] = {}
    if file is not None:
        try:
            raw = tomllib.loads(file.read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"cannot read config file {file}: {exc}") from exc
        broker_section = raw.get("broker", {})
        store_section = raw.get("store", {})
        for k, v in broker_section.items():
            if k not in _BROKER_KEYS:
                raise ConfigError(f"{file}: unknown key [broker].{k}")
            values[k] = v
        for k, v in store_section.items():
            if k not in _STORE_KEYS:
                raise ConfigError(f"{file}: unknown key [store].{k}")
            store[k] = v
    for name, v in env.items():
        if not name.startswith("TXMQ_") or name == "TXMQ_ENDPOINTS" or name == "TXMQ_SEED":
            continue
        k = name[5:].lower()
        if k.startswith("store_") and k[6:] in _STORE_KEYS:
            store[k[6:]] = v
        elif k in _BROKER_KEYS:
            values[k] = v
    for k, v in flags.items():
        if v is None:
            continue
        (store if k in _STORE_KEYS else values)[k] = v
    if "data_dir" not in values:
        raise ConfigError("a data directory is required (--data-dir, TXMQ_DATA_DIR or data_dir)")
    defaults_store = StoreConfig()
    store_cfg = StoreConfig(
        **{k: _coerce(k, v, getattr(defaults_store, k), "store") for k, v in store.items()}
    )
    probe = BrokerConfig(data_dir=Path("."))
    kwargs = {k: _coerce(k, v, getattr(probe, k), "broker") for k, v in values.items()}
    return BrokerConfig(store=store_cfg, **kwargs)


def env() -> Mapping[str, str]:
    return os.environ
