"""Start a single-member etcd on this machine (for `txmq cluster up` and tests).

Owns: finding the ``etcd`` binary (Debian's ``etcd-server`` package), choosing free ports,
starting it with its data beside the cluster's, and waiting until it answers a read.
Must not: stop processes it did not start.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from txmq import limits
from txmq.coordination.etcd import Etcd, EtcdTls
from txmq.errors import CoordinationError
from txmq.store.files.disk import make_private_dirs, open_private

PACKAGE_HINT = "install Debian's etcd-server package (apt-get install etcd-server)"


def etcd_binary() -> str:
    """The path of ``etcd``; CoordinationError naming the package when it is missing."""
    found = shutil.which("etcd")
    if found is None:
        raise CoordinationError(f"etcd is not installed: {PACKAGE_HINT}")
    return found


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


@dataclass(frozen=True, slots=True)
class EtcdServing:
    """etcd serving TLS: its certificate and key (PEM), and with ``client_ca`` it requires
    client certificates signed by that CA (etcd's ``--client-cert-auth``)."""

    cert_file: Path
    key_file: Path
    client_ca: Path | None = None


def start_local_etcd(
    data_dir: Path,
    host: str = "127.0.0.1",
    *,
    serving: EtcdServing | None = None,
    client: EtcdTls | None = None,
) -> tuple[subprocess.Popen[bytes], str]:
    """Start etcd with its data in ``data_dir`` (created) and its log in ``data_dir/etcd.log``;
    returns the process and its client endpoint ``HOST:PORT`` once it answers (to ``client``:
    how this side reaches it when it serves TLS)."""
    binary = etcd_binary()
    make_private_dirs(data_dir)
    client_port, peer = _free_port(host), _free_port(host)
    scheme = "https" if serving is not None else "http"
    client_url, peer_url = f"{scheme}://{host}:{client_port}", f"http://{host}:{peer}"
    cmd = [
        binary, "--name", "txmq", "--data-dir", str(data_dir / "member"),
        "--listen-client-urls", client_url, "--advertise-client-urls", client_url,
        "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
        "--initial-cluster", f"txmq={peer_url}", "--log-level", "warn",
        # Leaders rewrite their group's in-sync set about once a second under writes (its
        # confirmed end, ADR 0005): keep etcd's history of revisions bounded.
        "--auto-compaction-mode", "revision", "--auto-compaction-retention", "10000",
    ]  # fmt: skip
    if serving is not None:
        cmd += ["--cert-file", str(serving.cert_file), "--key-file", str(serving.key_file)]
        if serving.client_ca is not None:
            cmd += ["--client-cert-auth", "--trusted-ca-file", str(serving.client_ca)]
    with os.fdopen(open_private(data_dir / "etcd.log", os.O_WRONLY | os.O_APPEND), "ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=log)
    endpoint = f"{host}:{client_port}"
    try:
        wait_ready(endpoint, proc, tls=client)
    except CoordinationError:
        proc.kill()
        proc.wait()
        raise
    return proc, endpoint


def wait_ready(
    endpoint: str, proc: subprocess.Popen[bytes] | None = None, *, tls: EtcdTls | None = None
) -> None:
    """Poll etcd at ``endpoint`` until a read succeeds, within ``ETCD_START_TIMEOUT_MS``."""
    etcd = Etcd(endpoint, tls=tls)
    deadline = time.monotonic() + limits.ETCD_START_TIMEOUT_MS / 1000
    last = ""
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise CoordinationError(f"etcd exited with status {proc.returncode} at start")
        try:
            etcd.get("/txmq/ready")
            return
        except CoordinationError as exc:
            last = str(exc)
        time.sleep(0.05)  # sleep: etcd offers no readiness event before it answers
    raise CoordinationError(f"etcd at {endpoint} did not answer within the start bound: {last}")
