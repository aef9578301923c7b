"""Placeholder entry point; replaced by the real CLI."""


def main() -> None:
    raise SystemExit("txmq: not built yet")
