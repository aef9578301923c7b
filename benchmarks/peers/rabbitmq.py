"""RabbitMQ with publisher confirms: a durable quorum queue, persistent messages, one
blocking publish at a time per channel (the confirm arrives after the Raft WAL is fsynced).

Owns: a throwaway node (its own epmd, node name, ports, mnesia and log dirs, no plugins) and
the workload over pika. Must not: use the system's rabbitmq-server service or default ports.
There is no business write: RabbitMQ cannot commit a database row and a message together.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pika

from ._base import Absent, Running, free_port, terminate, wait_port, which

TITLE = "RabbitMQ confirms"
RMQ_DIR = "/usr/lib/rabbitmq/bin"
PREFETCH = 200


def _env(work: Path, port: int, epmd_port: int) -> dict[str, str]:
    (work / "home").mkdir(parents=True, exist_ok=True)
    (work / "plugins").write_text("[].\n")
    return {
        **os.environ,
        # A private HOME keeps the Erlang cookie out of the real one.
        "HOME": str(work / "home"),
        "RABBITMQ_NODENAME": f"bench{port}@localhost",
        "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
        "RABBITMQ_NODE_PORT": str(port),
        "RABBITMQ_DIST_PORT": str(free_port()),
        "ERL_EPMD_PORT": str(epmd_port),
        "RABBITMQ_MNESIA_BASE": str(work / "mnesia"),
        "RABBITMQ_LOG_BASE": str(work / "log"),
        "RABBITMQ_ENABLED_PLUGINS_FILE": str(work / "plugins"),
        "RABBITMQ_CONFIG_FILE": str(work / "rabbitmq"),
        "RABBITMQ_ADVANCED_CONFIG_FILE": str(work / "advanced.config"),
        "RABBITMQ_CONF_ENV_FILE": str(work / "rabbitmq-env.conf"),
        "RABBITMQ_PID_FILE": str(work / "pid"),
    }


def _version(server: str) -> str:
    for base in ("/usr/lib/rabbitmq/lib",):
        if os.path.isdir(base):
            names = sorted(n for n in os.listdir(base) if n.startswith("rabbitmq_server-"))
            if names:
                return "RabbitMQ " + names[-1].split("-", 1)[1]
    return f"RabbitMQ ({server})"


def start(work: Path) -> Running:
    server = which("rabbitmq-server", RMQ_DIR)
    epmd = which("epmd", "/usr/lib/erlang/bin")
    if server is None or epmd is None:
        raise Absent("rabbitmq-server not found (apt-get install rabbitmq-server)")
    # Debian's /usr/sbin wrapper switches to the rabbitmq user and logs to /var/log: call the
    # real script instead so the node stays ours.
    direct = Path(RMQ_DIR) / "rabbitmq-server"
    if direct.exists():
        server = str(direct)
    port, epmd_port = free_port(), free_port()
    env = _env(work, port, epmd_port)
    with open(work / "stdout.log", "wb") as log:  # the children keep their own descriptors
        # Our own foreground epmd, so stopping it is stopping a process we started.
        epmd_proc = subprocess.Popen(
            [epmd, "-port", str(epmd_port)], env=env, stdout=log, stderr=log
        )
        proc = subprocess.Popen([server], env=env, stdout=log, stderr=log, start_new_session=True)

    def stop() -> None:
        ctl = Path(RMQ_DIR) / "rabbitmqctl"
        if ctl.exists() and proc.poll() is None:
            subprocess.run(
                [str(ctl), "-n", env["RABBITMQ_NODENAME"], "stop"],
                env=env,
                capture_output=True,
                timeout=60,
                check=False,
            )
        terminate(proc)
        terminate(epmd_proc)

    try:
        wait_port(port, proc, 90, "rabbitmq-server")
    except Absent:
        stop()
        raise
    return Running(
        endpoint=str(port),
        pid=proc.pid,
        version=_version(server),
        durability="quorum queue, persistent messages, publisher confirm after WAL fsync",
        stop=stop,
        notes=[f"consumer prefetch {PREFETCH}, manual ack per message"],
    )


def _connect(endpoint: str) -> pika.BlockingConnection:
    params = pika.ConnectionParameters(host="127.0.0.1", port=int(endpoint), heartbeat=0)
    return pika.BlockingConnection(params)


def prepare(endpoint: str, name: str) -> None:
    conn = _connect(endpoint)
    ch = conn.channel()
    ch.queue_declare(name, durable=True, arguments={"x-queue-type": "quorum"})
    conn.close()


class Producer:
    def __init__(self, endpoint: str, name: str) -> None:
        self.conn = _connect(endpoint)
        self.ch = self.conn.channel()
        self.ch.confirm_delivery()  # basic_publish now blocks until the broker confirms
        self.name = name
        self.props = pika.BasicProperties(delivery_mode=pika.DeliveryMode.Persistent)

    def send(self, key: bytes, body: bytes) -> None:
        self.ch.basic_publish("", self.name, body, self.props, mandatory=True)

    def close(self) -> None:
        self.conn.close()


def consume(
    endpoint: str,
    name: str,
    ready: Callable[[], None],
    stop: Callable[[], bool],
    got: Callable[[bytes], None],
) -> None:
    conn = _connect(endpoint)
    ch = conn.channel()
    ch.basic_qos(prefetch_count=PREFETCH)
    ready()
    for method, _props, body in ch.consume(name, inactivity_timeout=0.1):
        if method is not None:
            ch.basic_ack(method.delivery_tag)
            got(body)
        if stop():
            break
    ch.cancel()
    conn.close()
