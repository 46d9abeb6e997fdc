"""The life of a development server's process: ports, starting, stopping, finding again.

Owns what every development server shares (:class:`LocalServer`, the base of
:class:`psmatch.devservers.kafka_broker.KafkaBroker` and
:class:`psmatch.devservers.redis_server.RedisServer`): free loopback ports, a process
started attached or detached, :meth:`LocalServer.stop` (SIGTERM, then SIGKILL after a
grace period) and :meth:`LocalServer.kill` (SIGKILL, as a crash would), and a detached
server found again from its ``server.json``; and the helpers the Spark standalone
daemons use too (:func:`stop_process`, :func:`log_tail`).

Two lifetimes:

* attached (the default, for tests): the server gets SIGTERM when the process that
  started it dies, so a killed test run leaves no orphan;
* ``detached=True`` (``psmatch run --start-local``, ``psmatch servers``): the server
  runs in its own session and outlives whoever started it; its pid and ports are
  recorded in ``<data_dir>/server.json``, so a later process can find it again
  (``adopt``) and stop it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any, Self

from psmatch.errors import PsmatchError

log = logging.getLogger(__name__)


class LocalServerError(PsmatchError):
    """A development server could not be started or is missing its files."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    """Whether something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _die_with_parent() -> None:
    """In the child before exec: get SIGTERM when the starting process dies (Linux).

    Linux sends it when the *thread* that started the child ends: start a server from a
    thread that outlives it (a server started from a ``threading.Timer`` dies with the
    timer's thread)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` is a running process (a zombie counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace")


def _stop_pid(pid: int, name: str, grace: float) -> None:
    """SIGTERM a process that is not our child, SIGKILL it after ``grace`` seconds."""
    log.info("stopping %s (pid %d)", name, pid)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while pid_alive(pid):
        if time.monotonic() > deadline:
            log.warning("%s did not stop within %.0f s; killing it", name, grace)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            grace = 0
        time.sleep(0.1)


def stop_process(proc: subprocess.Popen[bytes], name: str, grace: float = 20.0) -> None:
    """Stop our child ``proc`` (SIGTERM, SIGKILL after ``grace`` seconds); ``name`` is for
    the log."""
    if proc.poll() is not None:
        return
    log.info("stopping %s (pid %d)", name, proc.pid)
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        log.warning("%s did not stop within %.0f s; killing it", name, grace)
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait(timeout=10)


def log_tail(path: Path, lines: int = 30) -> str:
    """The last ``lines`` lines of a server's log file, for an error message."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class LocalServer:
    """What :class:`KafkaBroker` and :class:`RedisServer` share: the process's life.

    Subclasses are dataclasses with ``data_dir``, ``port``, ``detached`` and the private
    ``_proc`` (our child) / ``_pid`` (a detached server found again by :meth:`adopt`).
    """

    NAME = "server"
    STOP_GRACE = 20.0
    data_dir: Path
    port: int
    detached: bool
    _proc: subprocess.Popen[bytes] | None
    _pid: int | None

    @property
    def state_file(self) -> Path:
        """``server.json``: pid and ports of a detached server."""
        return self.data_dir / "server.json"

    @property
    def pid(self) -> int | None:
        if self._proc is not None:
            return self._proc.pid
        return self._pid

    @property
    def running(self) -> bool:
        if self._proc is not None:
            return self._proc.poll() is None
        return self._pid is not None and pid_alive(self._pid)

    def _state(self) -> dict[str, Any]:
        return {"port": self.port}

    def _launch(self, cmd: list[str], stdout: Any) -> None:
        if self.running:
            raise LocalServerError(f"{self.NAME} is already running (pid {self.pid})")
        self._pid = None
        self._proc = subprocess.Popen(
            cmd,
            stdout=stdout,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C in the terminal does not reach it
            # attached: no orphan server if we are killed
            preexec_fn=None if self.detached else _die_with_parent,
        )
        if self.detached:
            state = {"pid": self._proc.pid, "cmd": self.NAME, **self._state()}
            self.state_file.write_text(json.dumps(state))

    def _check_alive(self, log_file: Path) -> None:
        if self._proc is not None and self._proc.poll() is not None:
            raise LocalServerError(
                f"{self.NAME} exited with code {self._proc.returncode}:\n{log_tail(log_file)}"
            )

    def stop(self) -> None:
        """Stop the server (SIGTERM, SIGKILL after a grace period); ports and data stay."""
        if self._proc is not None:
            stop_process(self._proc, self.NAME, grace=self.STOP_GRACE)
            self._proc = None
        elif self._pid is not None:
            _stop_pid(self._pid, self.NAME, self.STOP_GRACE)
            self._pid = None
        with contextlib.suppress(FileNotFoundError):
            self.state_file.unlink()

    def kill(self) -> None:
        """End the server with SIGKILL, as a crash would; ports and data stay."""
        pid = self.pid
        if pid is not None and self.running:
            log.info("killing %s (pid %d)", self.NAME, pid)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            if self._proc is not None:
                self._proc.wait(timeout=10)
            while pid_alive(pid):
                time.sleep(0.05)
        self._proc = None
        self._pid = None
        with contextlib.suppress(FileNotFoundError):
            self.state_file.unlink()

    def restart(self) -> Self:
        """Stop and start again on the same port(s) and data directory."""
        self.stop()
        return self.start()  # type: ignore[attr-defined,no-any-return]

    @classmethod
    def _recorded(cls, data_dir: Path, marker: str) -> dict[str, Any] | None:
        """The state of a detached server in ``data_dir`` that still runs, else None."""
        try:
            state = json.loads((data_dir / "server.json").read_text())
            pid = int(state["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if not pid_alive(pid) or marker not in _cmdline(pid):
            return None  # gone, or the pid now belongs to another program
        return dict(state)
