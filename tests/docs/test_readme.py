"""Every code block of README.md runs as written, against real servers, so the README cannot rot.

Method: tests/docs/readme_blocks.py splits the README into its sh, python and js blocks, each
under its "## " section and with its directive (a long-running server, the Node.js install);
its docstring says which rewrite is applied (ports moved by one offset) and why no other is
needed. One working directory serves the whole module, as one reader's terminal would: a reader
who ran ``source .venv/bin/activate``, i.e. PATH starting with the venv's bin (this interpreter's
directory) and no PYSPARK_PYTHON. sh blocks run with ``bash -e``; python blocks are saved under
the name their first comment gives and run with the venv's python; the js block runs with node.
Each test runs one section's blocks in README order, and a section's servers are stopped when
its test ends (the broker of "Start a broker" lives for the module). A section with blocks that
no test runs fails ``test_every_block_is_run``.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.docs.readme_blocks import README, Block, Ports, blocks
from tests.ports import accepts

SERVER_READY_S = 240.0
STOP_S = 30.0
SHELL_TIMEOUT_S = 180
SCRIPT_TIMEOUT_S = 420
CLI_DEFAULT_PORT = 8081

SECTIONS_RUN = {
    "Quick start": "tests/integration/test_quickstart.py (make demo; make test is CI itself)",
    "Start a broker": "the module's broker fixture",
    "The official clients": "test_official_clients, test_node_client_block",
    "Spark": "test_spark_local, test_spark_standalone, test_spark_connect",
    "The CLI": "test_cli",
    "Cluster and replicas": "test_cluster, test_replicas",
}


@dataclass
class Reader:
    """One reader's terminal: a working directory, an activated venv, the servers it started."""

    cwd: Path
    ports: Ports
    env: dict[str, str]
    servers: list[tuple[subprocess.Popen[bytes], Path]] = field(default_factory=list)

    def run(self, block: Block, timeout_s: float = SHELL_TIMEOUT_S) -> str:
        code = self.ports.rewrite(block.code)
        if block.language == "sh":
            args = ["bash", "-e", "-c", code]
        else:
            script = self.cwd / block.script_name
            script.write_text(code)
            args = [sys.executable if block.language == "python" else "node", script.name]
        r = subprocess.run(
            args, cwd=self.cwd, env=self.env, capture_output=True, text=True, timeout=timeout_s
        )
        assert r.returncode == 0, (
            f"README block in '{block.section}' exited {r.returncode}:\n{code}\n"
            f"--- stdout\n{r.stdout[-3000:]}\n--- stderr\n{r.stderr[-4000:]}"
        )
        return r.stdout

    def start(self, block: Block) -> None:
        log = self.cwd / f"server-{len(self.servers)}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                ["bash", "-e", "-c", self.ports.rewrite(block.code)],
                cwd=self.cwd,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.servers.append((proc, log))
        wanted = [self.ports.port(p) for p in block.server_ports]
        deadline = time.monotonic() + SERVER_READY_S
        while not all(accepts(p) for p in wanted):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(
                    f"README server in '{block.section}' not ready on {wanted} "
                    f"(exit {proc.poll()}):\n{block.code}\n{log.read_text()[-4000:]}"
                )
            time.sleep(0.2)  # sleep: poll interval of a bounded wait for the port to accept

    def stop_servers(self, keep: int = 0) -> None:
        """SIGTERM to each server's process group past the first ``keep`` (newest first), then
        SIGKILL to what lingers in the group."""
        while len(self.servers) > keep:
            proc, _ = self.servers.pop()
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(STOP_S)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(STOP_S)
            _kill_group_leftovers(proc.pid)

    def section(self, name: str, *, timeout_s: float = SHELL_TIMEOUT_S) -> list[str]:
        """Runs (or starts) the section's blocks in order; returns each run block's stdout."""
        outputs = []
        for block in section_blocks(name):
            if block.directive == "node-install":
                continue  # done by the node_client fixture
            if block.server_ports:
                self.start(block)
            else:
                outputs.append(self.run(block, timeout_s))
        return outputs


def _kill_group_leftovers(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # the whole group is gone already
        os.killpg(pgid, signal.SIGKILL)  # a child that outlived its shell (a JVM, a broker)


def section_blocks(name: str) -> list[Block]:
    found = [b for b in blocks(README.read_text()) if b.section == name]
    assert found, f"the README has no runnable block under '## {name}'"
    return found


@pytest.fixture(scope="module")
def reader(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Reader]:
    cwd = tmp_path_factory.mktemp("readme")
    venv_bin = str(Path(sys.executable).parent)
    env = dict(os.environ, PATH=f"{venv_bin}{os.pathsep}{os.environ['PATH']}", HOME=str(cwd))
    env["VIRTUAL_ENV"] = str(Path(venv_bin).parent)
    for name in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH"):
        env.pop(name, None)
    seed = int(os.environ.get("TXMQ_SEED", random.randrange(1 << 30)))
    print(f"TXMQ_SEED={seed}")
    ports = Ports(README.read_text(), random.Random(seed))
    # The CLI's default endpoint, 127.0.0.1:8081, moves with every other README port.
    env["TXMQ_ENDPOINTS"] = f"127.0.0.1:{ports.port(CLI_DEFAULT_PORT)}"
    r = Reader(cwd, ports, env)
    try:
        r.section("Start a broker")
        yield r
    finally:
        r.stop_servers()


@pytest.fixture
def section_servers(reader: Reader) -> Iterator[Reader]:
    """The reader; the servers a test's section starts are stopped when it ends."""
    started_before = len(reader.servers)
    yield reader
    reader.stop_servers(keep=started_before)


def test_every_block_is_run() -> None:
    sections = {b.section for b in blocks(README.read_text())}
    unrun = sections - set(SECTIONS_RUN)
    assert not unrun, f"README sections whose blocks no test runs: {unrun}"


def test_official_clients(section_servers: Reader) -> None:
    python_blocks = [b for b in section_blocks("The official clients") if b.language == "python"]
    assert [b.script_name for b in python_blocks] == ["producer.py", "consumer.py"]
    produced = section_servers.run(python_blocks[0])
    assert produced.startswith("committed order-"), produced
    order_id = produced.split()[1]
    consumed = section_servers.run(python_blocks[1])
    assert order_id in consumed, consumed


def test_node_client_block(section_servers: Reader, node_client: Path) -> None:
    section_servers.env["NODE_PATH"] = str(node_client)
    [js] = [b for b in section_blocks("The official clients") if b.language == "js"]
    assert "committed order-js-1" in section_servers.run(js)


def test_cli(section_servers: Reader) -> None:
    [out] = section_servers.section("The CLI")
    assert "orders" in out, out


def test_cluster(section_servers: Reader) -> None:
    blocks_ = [b for b in section_blocks("Cluster and replicas") if not b.needs_etcd]
    cluster_up, commands = blocks_[0], blocks_[1]
    section_servers.start(cluster_up)
    out = section_servers.run(commands)  # cluster status exits 1 while a member is down
    assert "created topic payments" in out, out


def test_replicas(section_servers: Reader, etcd_binary: Path) -> None:
    all_blocks = section_blocks("Cluster and replicas")
    at = next(i for i, b in enumerate(all_blocks) if b.needs_etcd)
    section_servers.start(all_blocks[at])
    section_servers.run(all_blocks[at + 1])  # cluster status exits 1 while a replica is down


def _spark_blocks() -> list[Block]:
    return section_blocks("Spark")


@pytest.mark.slow
def test_spark_local(section_servers: Reader, java_runtime: Path) -> None:
    [producer] = [b for b in section_blocks("The official clients") if b.language == "python"][:1]
    section_servers.run(producer)  # an order to read, whichever tests ran before
    scripts = [b for b in _spark_blocks() if b.language == "python"]
    local = [b for b in scripts if b.script_name in ("orders_to_parquet.py", "ship.py")]
    assert [b.script_name for b in local] == ["orders_to_parquet.py", "ship.py"]
    out = section_servers.run(local[0], SCRIPT_TIMEOUT_S)
    assert "order-" in out, out
    section_servers.run(local[1], SCRIPT_TIMEOUT_S)
    check = "txmq consume shipments --group readme-check --max 2 --wait-s 5\n"
    shipped = section_servers.run(Block("Spark", "sh", check, ""))
    assert shipped.count("shipped") == 2, shipped


@pytest.mark.slow
def test_spark_standalone(section_servers: Reader, java_runtime: Path) -> None:
    spark = _spark_blocks()
    at = next(i for i, b in enumerate(spark) if 7077 in b.server_ports)
    section_servers.start(spark[at])
    out = section_servers.run(spark[at + 1], SCRIPT_TIMEOUT_S)
    assert out.strip().splitlines()[-1].startswith("orders: "), out


@pytest.mark.slow
def test_spark_connect(section_servers: Reader, java_runtime: Path) -> None:
    spark = _spark_blocks()
    at = next(i for i, b in enumerate(spark) if 15002 in b.server_ports)
    section_servers.start(spark[at])
    out = section_servers.run(spark[at + 1], SCRIPT_TIMEOUT_S)
    assert "count" in out, out
