"""A PostgreSQL cluster and a Redis server of a test's own, on free ports, that the test
may stop, freeze and restart without disturbing the machine's shared servers."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from helpers import free_port

PG_BIN = Path("/usr/lib/postgresql") / (sorted(os.listdir("/usr/lib/postgresql"))[-1] if Path(
    "/usr/lib/postgresql").exists() else "15") / "bin"


def _as_postgres(command: list[str]) -> list[str]:
    """initdb and postgres refuse to run as root: drop to the postgres user when root."""
    if os.geteuid() == 0:
        return ["setpriv", "--reuid=postgres", "--regid=postgres", "--clear-groups", *command]
    return command


def available() -> bool:
    return (PG_BIN / "initdb").exists() and shutil.which("redis-server") is not None and (
        os.geteuid() != 0 or shutil.which("setpriv") is not None)


@dataclass
class PrivatePostgres:
    directory: Path
    port: int

    @classmethod
    def start(cls) -> PrivatePostgres:
        # its own directory: test directories are private to root, where postgres cannot go
        directory = Path(tempfile.mkdtemp(prefix="paretune-pg-"))
        if os.geteuid() == 0:
            shutil.chown(directory, "postgres", "postgres")
        subprocess.run(_as_postgres([str(PG_BIN / "initdb"), "-D", str(directory), "-U", "postgres",
                                     "--auth=trust", "-E", "UTF8"]), check=True, capture_output=True)
        server = cls(directory, free_port())
        server.run("start")
        return server

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def run(self, action: str) -> None:
        options = f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1 -c fsync=off"
        subprocess.run(_as_postgres([str(PG_BIN / "pg_ctl"), "-D", str(self.directory), "-o", options,
                                     "-w", "-t", "60", "-m", "fast", "-l", str(self.directory / "server.log"),
                                     action]), check=True, capture_output=True)

    def restart(self) -> None:
        self.run("restart")

    def stop(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self.run("stop")
        shutil.rmtree(self.directory, ignore_errors=True)


@dataclass
class PrivateRedis:
    process: subprocess.Popen[bytes]
    port: int

    @classmethod
    def start(cls, root: Path, port: int | None = None) -> PrivateRedis:
        port = port or free_port()
        process = subprocess.Popen(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(root)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                import socket

                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    return cls(process, port)
            time.sleep(0.1)
        process.kill()
        raise RuntimeError("redis-server did not start")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def freeze(self) -> None:
        self.process.send_signal(signal.SIGSTOP)  # the port stays open; nothing answers

    def thaw(self) -> None:
        self.process.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        """Gone at once, its port closed (start it again with `start(root, port)`)."""
        self.process.kill()
        self.process.wait()

    def stop(self) -> None:
        self.thaw()
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
