"""Client-side commands of the ``txmq`` CLI (filled in below)."""

from __future__ import annotations

import click


def register(cli: click.Group) -> None:
    return None
