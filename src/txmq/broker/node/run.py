"""Running a broker process: logging, signals, the event loop, and which node it runs.

Owns: ``run``, the foreground life of ``txmq broker``: INFO logging, SIGINT/SIGTERM (a clean
stop) and SIGHUP (reload the ACL file), uvloop, and the choice between one broker
(node/serve.py) and one replica of an etcd-coordinated group (node/replica.py).
Must not: wire services (node/serve.py does) or hold protocol or storage logic.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import signal

import uvloop

from txmq import malloc
from txmq.broker.config.broker_config import BrokerConfig
from txmq.broker.node.replica import serve_replica
from txmq.broker.node.serve import cluster_member, serve
from txmq.errors import ConfigError, invariant

log = logging.getLogger("txmq.broker")


def replica_etcd(config: BrokerConfig) -> str:
    """The etcd this broker's group is led through ("" for a plain broker): ``--etcd``, else
    the cluster file's.

    Raises:
        ClusterFileError: the cluster file is bad.
        ConfigError: the file has groups of several replicas and no etcd is given.
    """
    found = cluster_member(config) if config.cluster_file is not None and not config.etcd else None
    etcd = config.etcd or (found[0].etcd if found is not None else "")
    if found is not None and found[0].replicated and not etcd:
        raise ConfigError(
            f"cluster {found[0].name!r} has groups of several replicas, led through etcd: "
            "give --etcd HOST:PORT or etcd in its [cluster] table"
        )
    return etcd


def run(config: BrokerConfig) -> None:
    """Run a broker in the foreground until SIGINT/SIGTERM, then shut down cleanly.

    Prints ``txmq broker listening on HOST:PORT`` (flushed) once it accepts RPCs: with
    ``port=0`` that line is how a caller learns the port.
    """
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    if not malloc.keep_large_blocks():
        log.info("malloc tuning does not apply here (not glibc); large replies cost page faults")

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        hangup = asyncio.Event()
        loop.add_signal_handler(signal.SIGHUP, hangup.set)

        def ready(port: int) -> None:
            invariant(port > 0, "the bound port is known")
            malloc.collect_less_often()  # after recovery: what it built lives as long
            # In a cluster the line names the member (``txmq cluster up`` prints these lines).
            name = f"{config.broker_name} " if config.broker_name else ""
            print(f"txmq broker {name}listening on {config.host}:{port}", flush=True)

        etcd = replica_etcd(config)
        if etcd:
            replica = dataclasses.replace(config, etcd=etcd)
            await serve_replica(replica, ready=ready, stop=stop, hangup=hangup)
        else:
            await serve(config, ready=ready, stop=stop, hangup=hangup)

    # uvloop (libuv) instead of asyncio's own loop: grpc.aio runs on it, and every RPC's
    # wake-ups, callbacks and cross-thread hand-offs cost less CPU there (bench_broker).
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main())
