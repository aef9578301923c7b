"""The audit's terminal summary (rich): the verdict, the counts with what each kind means, and
the first examples of each kind. Pure: a result in, renderables out.
"""

from __future__ import annotations

from typing import Any, Final

from rich.console import Group
from rich.table import Table
from rich.text import Text

from txmq.audit.result import KIND_MEANING, KINDS, AuditResult

# Examples shown per kind on a terminal (``--json`` and the report carry all that were fetched).
SHOWN_PER_KIND: Final = 10
_COLUMNS: Final = {
    "lost": ("key", "at"),
    "phantom": ("key", "message_id", "at", "copies"),
    "duplicate": ("key", "copies", "first_message_id", "last_message_id", "first_at"),
    "undecided": ("key", "transaction_id", "state", "age_ms", "db_row", "broker"),
}


def verdict(result: AuditResult) -> Text:
    if result.consistent:
        return Text("CONSISTENT: the database and the topic agree", style="bold green")
    found = sum(result.counts[k] for k in KINDS)
    return Text(f"INCONSISTENT: {found} discrepancies", style="bold red")


def summary(result: AuditResult) -> Group:
    src, window = result.source, result.window.as_json()
    head = Table(title="txmq audit", show_header=False)
    head.add_column("")
    head.add_column("")
    head.add_row("table", f"{src['table']} ({src['jdbc_url']}), key {src['key']}")
    head.add_row("topic", f"{src['topic']}, matched on {src['match']}")
    head.add_row(
        "window",
        f"{window['since'] or 'beginning'} .. {window['until'] or 'now'} "
        f"(grace {window['grace_ms'] // 1000} s)",
    )
    head.add_row("rows in the database", str(result.db_rows))
    head.add_row("committed messages", str(result.messages))
    if result.unkeyed_messages:
        head.add_row("messages without a join value", str(result.unkeyed_messages))
    if result.db_duplicate_keys:
        head.add_row("keys with several rows", str(result.db_duplicate_keys))
    counts = Table(title="discrepancies")
    counts.add_column("kind")
    counts.add_column("count", justify="right")
    counts.add_column("meaning")
    for kind in KINDS:
        n = result.counts[kind]
        counts.add_row(kind, f"[red]{n}[/red]" if n else "0", _meaning(result, kind))
    parts: list[Any] = [head, counts]
    parts += [_examples(result, k) for k in KINDS if result.examples[k]]
    if result.report_dir:
        parts.append(Text(f"report: {result.report_dir}"))
    parts.append(verdict(result))
    return Group(*parts)


def _meaning(result: AuditResult, kind: str) -> str:
    text = KIND_MEANING[kind]
    if kind == "duplicate" and result.duplicate_copies:
        text += f" ({result.duplicate_copies} extra copies)"
    if kind == "undecided" and result.dead:
        text += f" ({result.dead} dead)"
    if kind == "lost" and result.lost_pending:
        text += f" ({result.lost_pending} still undecided: check-back may commit them)"
    return text


def _examples(result: AuditResult, kind: str) -> Table:
    shown = result.examples[kind][:SHOWN_PER_KIND]
    more = result.counts[kind] - len(shown)
    title = f"{kind}: first {len(shown)}" + (f" of {result.counts[kind]}" if more > 0 else "")
    t = Table(title=title)
    columns = _COLUMNS[kind]
    for c in columns:
        t.add_column(c)
    for item in shown:
        t.add_row(*("" if item.get(c) is None else str(item.get(c)) for c in columns))
    return t
