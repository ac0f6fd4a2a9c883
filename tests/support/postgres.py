"""A private PostgreSQL cluster for the tests: `initdb` into a temporary folder, `pg_ctl` on a free
port of 127.0.0.1 (trust auth, no fsync), stopped and removed afterwards, as the Temporal dev server
is. Debian's binaries (`apt-get install postgresql`, which `.ci/run` does where they are missing).
As root, the cluster runs as the `postgres` user (PostgreSQL refuses to run as root)."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

BIN = Path(os.environ.get("WOLF_PG_BIN", "/usr/lib/postgresql/15/bin"))


def available() -> str | None:
    """Why no cluster can start here (None: it can)."""
    if not (BIN / "initdb").exists():
        return f"PostgreSQL is not installed ({BIN / 'initdb'} is missing: apt-get install postgresql)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root without a `postgres` user to run the cluster as"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def cluster() -> Iterator[str]:
    """A running cluster: its connection URL (database `postgres`, user `postgres`)."""
    root = Path(tempfile.mkdtemp(prefix="wolf-pg-"))
    user = None
    if os.geteuid() == 0:
        user = "postgres"
        shutil.chown(root, user)
    data, port = root / "data", _free_port()

    def run(*args: str) -> None:
        subprocess.run([*args], check=True, user=user, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    run(str(BIN / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
    options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off"
    run(str(BIN / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(root / "log"), "-w", "start")
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            [str(BIN / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
            user=user, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False,
        )  # fmt: skip
        shutil.rmtree(root, ignore_errors=True)
