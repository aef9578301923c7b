"""The CLI without a broker (click's CliRunner, in process): help on every command, the
exit-code contract, configuration precedence and validation, the demo's report logic and its
failure plan.

Each error case checks the two promises scripts rely on: the documented exit code and exactly
one ``txmq: ...`` line on stderr.
"""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from txmq.broker.config.sources import load_config
from txmq.cli.main import _register, cli
from txmq.demo.report import FATE_COMMITS, Facts, SparkResult, checks, percentile
from txmq.errors import (
    BadRequestError,
    BrokerUnavailableError,
    ConfigError,
    NotFoundError,
    TxmqError,
)
from txmq.exits import EXIT_UNREACHABLE, EXIT_USAGE, exit_code_for
from txmq.model import FlushMode

_register()


def run(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)


def one_line_error(r: Result, code: int) -> str:
    assert r.exit_code == code, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("txmq: "), r.stderr
    return lines[0]


def all_command_paths(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = [prefix]
    for name, cmd in group.commands.items():
        if isinstance(cmd, click.Group):
            out += all_command_paths(cmd, (*prefix, name))
        else:
            out.append((*prefix, name))
    return out


def test_help_on_every_command() -> None:
    paths = all_command_paths(cli)
    for needed in (("broker",), ("topic", "create"), ("send",), ("tail",), ("demo",)):
        assert needed in paths
    for path in paths:
        r = run(*path, "--help")
        assert r.exit_code == 0 and "Usage" in r.stdout, path


@pytest.mark.parametrize(
    "args,text",
    [
        (["nosuch"], "No such command"),
        (["topic", "create"], "Missing argument"),
        (["topic", "create", "t", "--queues", "0"], "--queues"),
        (["topic", "create", "t", "--type", "weird"], "--type"),
        (["send", "t", "body", "--outcome", "maybe"], "--outcome"),
        (["txn", "resolve", "id", "perhaps"], "perhaps"),
        (["store", "verify", "--data-dir", "/nonexistent/txmq"], "does not exist"),
        (["demo", "--orders", "0"], "--orders"),
    ],
)
def test_usage_errors_are_one_line_exit_2(args: list[str], text: str) -> None:
    line = one_line_error(run(*args), EXIT_USAGE)
    assert text in line


@pytest.mark.parametrize(
    "args",
    [
        ["topic", "list"],
        ["topic", "describe", "orders"],
        ["group", "list"],
        ["txn", "list"],
        ["client", "list"],
        ["message", "show", "ABC"],
        ["send", "orders", "hi"],
        ["consume", "orders"],
        ["demo", "--orders", "5", "--no-spark"],
    ],
)
def test_broker_down_is_exit_3(args: list[str]) -> None:
    # Port 1 on loopback: nothing listens there, the connection is refused at once.
    line = one_line_error(run(*args, "--endpoints", "127.0.0.1:1"), EXIT_UNREACHABLE)
    assert "unreachable" in line


def test_endpoints_from_environment() -> None:
    r = run("topic", "list", env={"TXMQ_ENDPOINTS": "127.0.0.1:1"})
    assert "127.0.0.1:1" in one_line_error(r, EXIT_UNREACHABLE)


def test_exit_codes_by_error_type() -> None:
    assert exit_code_for(BrokerUnavailableError("h:1", "down")) == 3
    assert exit_code_for(ConfigError("bad")) == 2
    assert exit_code_for(NotFoundError("no topic")) == 2
    assert exit_code_for(BadRequestError("bad id")) == 2
    assert exit_code_for(TxmqError("refused")) == 1


# --- configuration -------------------------------------------------------------------------


def test_precedence_flags_over_env_over_file(tmp_path: Path) -> None:
    cfg = tmp_path / "broker.toml"
    cfg.write_text(
        '[broker]\ndata_dir = "/from/file"\nport = 1111\nhost = "0.0.0.0"\n'
        "transaction_check_max = 3\n"
        '[store]\nflush_mode = "async"\nsegment_size_bytes = 67108864\n'
    )
    env = {
        "TXMQ_PORT": "2222",
        "TXMQ_TRANSACTION_CHECK_MAX": "4",
        "TXMQ_STORE_DISK_WATERMARK": "0.5",
    }
    c = load_config(file=cfg, env=env, flags={"port": 3333, "host": None})
    assert c.port == 3333  # flag beats env and file
    assert c.transaction_check_max == 4  # env beats file
    assert c.host == "0.0.0.0"  # file beats default
    assert c.data_dir == Path("/from/file")
    assert c.store.flush_mode is FlushMode.ASYNC
    assert c.store.disk_watermark == 0.5
    assert c.store.segment_size_bytes == 67108864
    assert c.delivery_attempts_max == 16  # default
    # Unrelated TXMQ_* names are left to the tools that own them.
    assert load_config(
        file=None, env={"TXMQ_SEED": "1", "TXMQ_BENCH_DIR": "x"}, flags={"data_dir": "d"}
    )


@pytest.mark.parametrize(
    "toml,env,text",
    [
        ("[broker]\nport = 99999\n", {}, "port must be 0..65535"),
        ('[broker]\nport = "8081"\n', {}, "[broker].port: expected an integer"),
        ("[broker]\nauto_create_topics = 1\n", {}, "expected true or false"),
        ("[broker]\nnope = 1\n", {}, "unknown key [broker].nope"),
        ("[brokr]\nport = 1\n", {}, "unknown section [brokr]"),
        ('[store]\nflush_mode = "sometimes"\n', {}, "expected 'sync' or 'async'"),
        ("[broker\n", {}, "not valid TOML"),
        ("", {"TXMQ_PORT": "eighty"}, "TXMQ_PORT: expected an integer"),
        ("", {"TXMQ_AUTO_CREATE_TOPICS": "maybe"}, "TXMQ_AUTO_CREATE_TOPICS"),
        (
            "",
            {"TXMQ_STORE_RETENTION_MS": "5"},
            "retention_ms must be at least 60000 (one minute), got 5",
        ),
        (
            "[broker]\ntransaction_check_max = 0\n",
            {},
            "transaction_check_max must be 1..",
        ),
        ("[broker]\ntransaction_check_max = 0\n", {}, ", got 0"),
        (
            "[store]\ndisk_watermark = 1.5\n",
            {},
            "disk_watermark must be in (0, 1] (a fraction of the disk), got 1.5",
        ),
    ],
)
def test_bad_configuration_names_its_source(
    tmp_path: Path, toml: str, env: dict[str, str], text: str
) -> None:
    cfg = tmp_path / "broker.toml"
    cfg.write_text(toml)
    with pytest.raises(ConfigError, match=None) as err:
        load_config(file=cfg, env=env, flags={"data_dir": tmp_path / "d"})
    assert text in str(err.value)
    # The same through the command: one line, exit 2, before any port is bound.
    r = run("broker", "--data-dir", str(tmp_path / "d"), "--config", str(cfg), env=env)
    assert text in one_line_error(r, EXIT_USAGE)


def test_missing_data_dir_and_missing_file(tmp_path: Path) -> None:
    assert "data directory is required" in one_line_error(run("broker", "--port", "0"), 2)
    r = run("broker", "--data-dir", str(tmp_path), "--config", str(tmp_path / "none.toml"))
    assert "cannot read config file" in one_line_error(r, EXIT_USAGE)


# --- the demo's report and plan --------------------------------------------------------------


def consistent_facts() -> Facts:
    fates = {"a": "ok", "b": "local-error", "c": "hang", "d": "crash-before-db", "e": "ok"}
    committed = {o for o, fate in fates.items() if FATE_COMMITS[fate]}
    return Facts(
        fates=fates,
        qty={o: 2 for o in fates},
        db_orders=committed,
        processed={"a": 10.0, "c": 12.0},
        processed_rows=2,
        stock_deducted=4,
        dead_lettered={"e"},
        topic_messages=3,
        undecided=0,
        dead_transactions=0,
        spark=SparkResult(
            rows=2,
            orders=3,
            qty=6,
            # Dead-lettered "e" is never deducted, and "z" belongs to an earlier run.
            mismatches={"ordered but not deducted": ["e", "z"], "deducted more than once": []},
        ),
    )


def test_report_consistent_run_passes_every_check() -> None:
    results = checks(consistent_facts())
    assert results and all(c.ok for c in results), [c for c in results if not c.ok]


@pytest.mark.parametrize(
    "change,failing",
    [
        ({"processed": {"a": 1.0, "c": 1.0, "b": 1.0}}, "leaks"),
        ({"topic_messages": 4}, "committed messages (broker)"),
        ({"processed_rows": 3}, "deducted twice"),
        ({"stock_deducted": 6}, "stock deducted"),
        ({"undecided": 1}, "left undecided"),
        ({"db_orders": {"a", "c", "e", "d"}, "topic_messages": 4}, "injected fate"),
        ({"dead_lettered": set()}, "deducted + dead-lettered"),
        ({"spark": SparkResult(rows=2, orders=2, qty=6)}, "Spark: orders"),
        ({"spark_error": "the Spark step failed"}, "Spark step"),
        (
            {"spark": SparkResult(2, 3, 6, {"message without an order (leaked rollback)": ["b"]})},
            "Spark reconciliation",
        ),
    ],
)
def test_report_catches_each_inconsistency(change: dict[str, object], failing: str) -> None:
    facts = consistent_facts()
    for k, v in change.items():
        setattr(facts, k, v)
    bad = [c.name for c in checks(facts) if not c.ok]
    assert any(failing in name for name in bad), bad


def test_percentile_nearest_rank() -> None:
    assert percentile([], 0.5) == 0.0
    assert percentile([5.0], 0.99) == 5.0
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.5) == 50.0
    assert percentile(values, 0.99) == 99.0


def test_failure_plan_is_seeded_and_covers_every_fate() -> None:
    from txmq.demo import order_service as orders

    plan = orders.plan_orders(30, 3, "run")
    assert plan == orders.plan_orders(30, 3, "run")
    assert plan != orders.plan_orders(30, 4, "run")
    assert {o.fate for o in plan} == set(FATE_COMMITS)
    assert any(o.sku == orders.POISON_SKU for o in plan)
    assert len({o.order_id for o in plan}) == 30


def test_configuration_reference_lists_every_setting() -> None:
    from txmq.broker.config.sources import BROKER_FIELDS, STORE_FIELDS

    doc = (Path(__file__).parents[2] / "docs" / "configuration.md").read_text()
    for key in BROKER_FIELDS:
        assert f"| {key} | TXMQ_{key.upper()} |" in doc, key
    for key in STORE_FIELDS:
        assert f"| {key} | TXMQ_STORE_{key.upper()} |" in doc, key


def test_a_grpc_server_without_the_admin_channel_is_an_operation_failure() -> None:
    """Something answers, but it is not a txmq broker: exit 1 and say so, not 'unreachable'."""
    from concurrent.futures import ThreadPoolExecutor

    import grpc

    server = grpc.server(ThreadPoolExecutor(max_workers=1))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        line = one_line_error(run("topic", "list", "--endpoints", f"127.0.0.1:{port}"), 1)
        assert "no txmq admin channel" in line
    finally:
        server.stop(grace=None)


def test_demo_explains_a_missing_java(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from txmq.demo.steps import spark_skip_reason

    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # a PATH with no java on it
    reason = spark_skip_reason()
    assert reason is not None and "Java 17+" in reason
    old = tmp_path / "java"
    old.write_text("#!/bin/sh\necho 'openjdk version \"11.0.2\" 2019-01-15' >&2\n")
    old.chmod(0o755)
    reason = spark_skip_reason()
    assert reason is not None and "Java 11" in reason and "17+" in reason


# --- help texts and option names -----------------------------------------------------------


def help_text(*path: str) -> str:
    """A command's help, its lines joined: a phrase is found wherever click wrapped it."""
    return " ".join(run(*path, "--help").stdout.split())


def test_help_states_the_exit_codes_that_differ() -> None:
    """Commands whose exit codes go past "0 ok, 1 failed, 2 bad input, 3 unreachable" say so."""
    status = help_text("cluster", "status")
    assert "Exit codes: 0 every member answered 1 a member is down" in status
    up = help_text("cluster", "up")
    assert "Exit codes:" in up and "or one exited on its own before the stop" in up
    assert "2 bad input (an option, DIR holding a single broker's data)" in up
    assert "Exit code 1 when a problem is found" in help_text("store", "verify")
    assert "Exit code 1 when a record is damaged" in help_text("store", "status")
    assert "contradicting an earlier one fails (exit 1)" in help_text("txn", "resolve")
    assert "Ctrl-C is how a tail ends: it exits 0" in help_text("tail")


def test_throwaway_group_names() -> None:
    from txmq.client.admin import is_throwaway_group, throwaway_group

    fresh = throwaway_group()
    assert fresh != throwaway_group() and is_throwaway_group(fresh)
    for kept in ("txmq-cli-orders1", "txmq-cli-0123abc", "inventory", "txmq-cli-0123ABCD"):
        assert not is_throwaway_group(kept), kept


def test_store_verify_help_says_it_is_offline() -> None:
    text = help_text("store", "verify")
    assert "Offline: reads the data directory itself, no broker is asked" in text
    assert "broker's answer" not in text


def test_message_key_does_not_sit_beside_key_file() -> None:
    """A message key is --message-key; --key-file is the TLS key. The old --key still works
    (hidden) for scripts that used it."""
    for cmd in (["send"], ["message", "find"]):
        text = help_text(*cmd)
        assert "--message-key" in text and "--key-file" in text
        assert not re.search(r"--key\b(?!-)", text), text
    assert "--message-key" in one_line_error(run("message", "find"), EXIT_USAGE)


def test_every_endpoints_option_names_one_separator() -> None:
    for path in all_command_paths(cli):
        cmd = cli
        for name in path:
            cmd = cmd.commands[name]  # type: ignore[attr-defined]
        for p in cmd.params:
            if p.name == "endpoints" and path != ("dashboard",):
                text = " ".join((getattr(p, "help", "") or "").split())
                assert "comma-separated" not in text, path
                assert "HOST:P1;HOST:P2" in text or p.envvar is None, (path, text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "secret_key = '0123456789abc'",
            "users[0].secret_key: too short: 13 characters, at least 16",
        ),
        (
            f"secret_key = '{'s' * 300}'",
            "users[0].secret_key: too long: 300 characters, at most 256",
        ),
        ("secret_key = 16", "users[0].secret_key: expected a string, got an integer"),
        ("", "users[0].secret_key: required (a string of 16..256 characters)"),
    ],
)
def test_an_acl_file_says_what_is_wrong(tmp_path: Path, text: str, message: str) -> None:
    acl = tmp_path / "acl.toml"
    acl.write_text(f"[[users]]\naccess_key = 'orders-app'\n{text}\n")
    acl.chmod(0o600)
    r = run("broker", "--data-dir", str(tmp_path / "d"), "--acl-file", str(acl), "--port", "0")
    assert f"{acl}: {message}" in one_line_error(r, EXIT_USAGE)


def test_a_cluster_file_says_what_is_wrong(tmp_path: Path) -> None:
    bad = tmp_path / "cluster.toml"
    name = "b" * 70
    bad.write_text(f'[cluster]\nname = "x"\n[[broker]]\nname = "{name}"\nendpoint = "h:1"\n')
    r = run("broker", "--data-dir", str(tmp_path / "d"), "--cluster", str(bad), "--port", "0")
    assert "[[broker]] #1.name: too long: 70 characters, at most 64" in one_line_error(r, 2)
