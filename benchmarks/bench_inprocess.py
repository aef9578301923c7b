"""Instructions per transaction through the broker's own handlers, without gRPC's transport: a
paired A/B of code changes below what CPU times on this machine resolve.

Why: ``bench_instructions.py floor`` counts whole brokers behind real clients, which at load 6-21
lost consumers or transactions (docs/benchmarks.md). This drives one
process instead: per transaction a SendMessage of a 1 KiB transactional half, EndTransaction
(commit), ReceiveMessage and AckMessage, each through what decode.py registers (the generic
handler's lookup, the request deserializer, the handler gRPC would run, the reply serializer),
on uvloop over the production Parts, ConsumeRpcs and servicer (``app._add_services``). The
consumer sweep is not started: its once-a-second position save is work per second, and the
seconds a run takes under callgrind vary with the load.

How: each ``--src`` tree in turn (alternating, ``--rounds`` times) runs this file as a child
(``--child``) under ``valgrind --tool=callgrind --instr-atstart=no``; the child switches
instrumentation on after ``--warmup`` transactions and dumps after ``--count`` more. Printed:
instructions per transaction (all threads; the driver's own work, ~20 Python calls and the
request building, included, the same in every tree) and each tree's ratio to the first.


Run: ``.venv/bin/python benchmarks/bench_inprocess.py --src /other/src --src src
[--rounds 2] [--count 300] [--warmup 20]``. Needs valgrind (Debian's ``valgrind``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

PREFIX = "/apache.rocketmq.v2.MessagingService/"
# An official client's headers, as the handlers read them.
META = (
    ("x-mq-client-id", "bench-inprocess-1"),
    ("x-mq-language", "PYTHON"),
    ("x-mq-protocol", "v2"),
    ("x-mq-client-version", "5.0.0"),
)
TOTALS = re.compile(rb"^totals:\s+(\d+)", re.MULTILINE)
CHILD_TIMEOUT_S = 900


class _Server:
    """What ``_add_services`` registers on: the generic handlers, kept."""

    def __init__(self) -> None:
        self.generic: list[Any] = []

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        self.generic.extend(handlers)

    def add_registered_method_handlers(self, *args: Any) -> None:
        pass


class _Details:
    def __init__(self, method: str) -> None:
        self.method = PREFIX + method
        self.invocation_metadata = META


class _Context:
    def peer(self) -> str:
        return "ipv4:127.0.0.1:5555"

    def invocation_metadata(self) -> Any:
        return META


def _callgrind(*args: str) -> None:
    if os.environ.get("BENCH_INPROCESS_CG"):
        subprocess.run(["callgrind_control", *args, str(os.getpid())], check=True, timeout=120)


async def _child(warmup: int, count: int) -> None:
    import uvloop  # noqa: F401  (installed by the caller)
    from rocketmq.grpc_protocol import definition_pb2 as pb
    from rocketmq.grpc_protocol import service_pb2 as sv

    from txmq.broker.cluster.membership import Membership
    from txmq.broker.config.broker_config import BrokerConfig
    from txmq.broker.node.serve import _add_services
    from txmq.broker.state.parts import Parts

    data = Path(tempfile.mkdtemp(dir=os.environ.get("TXMQ_BENCH_DIR")))
    parts = await asyncio.to_thread(Parts, BrokerConfig(data_dir=data, auto_create_topics=True))
    from concurrent.futures import ThreadPoolExecutor

    executor = ThreadPoolExecutor(max_workers=4)
    server = _Server()
    membership = Membership.solo("127.0.0.1", 4242, now_ms=parts.now_ms)
    consume, _ = _add_services(server, parts, executor, membership)
    (service,) = [h for h in server.generic if "MessagingService" in h.service_name()]
    ctx = _Context()

    async def unary(name: str, request: Any) -> Any:
        h = service.service(_Details(name))
        reply = await h.unary_unary(h.request_deserializer(request.SerializeToString()), ctx)
        return h.response_serializer(reply)

    async def stream(name: str, request: Any) -> list[bytes]:
        h = service.service(_Details(name))
        req = h.request_deserializer(request.SerializeToString())
        return [h.response_serializer(r) async for r in h.unary_stream(req, ctx)]

    topic, group, body = "bench-inprocess", "bench-inprocess-group", os.urandom(512).hex().encode()

    async def transaction() -> None:
        m = pb.Message(body=body)
        m.topic.name = topic
        sp = m.system_properties
        sp.message_id, sp.message_type, sp.tag = uuid.uuid4().hex.upper(), pb.TRANSACTION, "t"
        sp.born_host, sp.body_encoding = "bench", pb.IDENTITY
        sp.born_timestamp.seconds = int(time.time())
        sp.orphaned_transaction_recovery_duration.seconds = 5
        sent = sv.SendMessageResponse.FromString(
            await unary("SendMessage", sv.SendMessageRequest(messages=[m]))
        )
        assert sent.status.code == 20000, sent
        e = sent.entries[0]
        end = sv.EndTransactionRequest(
            message_id=e.message_id, transaction_id=e.transaction_id, resolution=pb.COMMIT
        )
        end.topic.name = topic
        ended = sv.EndTransactionResponse.FromString(await unary("EndTransaction", end))
        assert ended.status.code == 20000, ended
        rq = sv.ReceiveMessageRequest(batch_size=1)
        rq.group.name, rq.message_queue.topic.name = group, topic
        rq.filter_expression.type, rq.filter_expression.expression = pb.TAG, "*"
        rq.invisible_duration.seconds, rq.long_polling_timeout.seconds = 30, 5
        got = [sv.ReceiveMessageResponse.FromString(r) for r in await stream("ReceiveMessage", rq)]
        msgs = [r.message for r in got if r.HasField("message")]
        assert len(msgs) == 1, got
        ack = sv.AckMessageRequest()
        ack.group.name, ack.topic.name = group, topic
        entry = ack.entries.add()
        entry.message_id = msgs[0].system_properties.message_id
        entry.receipt_handle = msgs[0].system_properties.receipt_handle
        acked = sv.AckMessageResponse.FromString(await unary("AckMessage", ack))
        assert acked.status.code == 20000, acked

    for _ in range(warmup):
        await transaction()
    _callgrind("-z")
    _callgrind("-i", "on")
    for _ in range(count):
        await transaction()
    _callgrind("-d")
    _callgrind("-i", "off")
    await consume.close()
    executor.shutdown()
    parts.close()


def _measure(src: Path, warmup: int, count: int, out_dir: Path) -> float:
    """Instructions per transaction of one child run over ``src``."""
    out = out_dir / f"cg.{len(list(out_dir.iterdir()))}"
    env = dict(os.environ, PYTHONPATH=str(src), BENCH_INPROCESS_CG="1")
    cmd = [
        "valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}.%p",
        sys.executable, __file__, "--child", "--warmup", str(warmup), "--count", str(count),
    ]  # fmt: skip
    subprocess.run(cmd, env=env, check=True, timeout=CHILD_TIMEOUT_S, capture_output=True)
    total = sum(
        int(m.group(1))
        for p in out_dir.glob(f"{out.name}.*.1")
        if (m := TOTALS.search(p.read_bytes()))
    )
    return total / count


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", type=Path, action="append", required=False, help="a src/ to run")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--count", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        import uvloop

        uvloop.install()
        asyncio.run(_child(args.warmup, args.count))
        return
    srcs = args.src or [Path(__file__).parents[1] / "src"]
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"# in-process transactions under callgrind, load average {load}")
    with tempfile.TemporaryDirectory(dir=os.environ.get("TXMQ_BENCH_DIR")) as d:
        for r in range(1, args.rounds + 1):
            first = 0.0
            for src in srcs:
                per = _measure(src, args.warmup, args.count, Path(d))
                first = first or per
                print(
                    f"round {r}, {src}: {per / 1e6:.4f} M instructions per transaction "
                    f"({per / first:.3f} of the first), {time.strftime('%H:%M:%S')}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
