"""A development Redis: :class:`RedisServer`, Debian's ``redis-server`` on loopback with
AOF persistence.

Owns the server's configuration (every write on disk before Redis acknowledges it, an
optional password and ACL users kept off the command line, TLS only when asked, with a
certificate from :class:`psmatch.devservers.tls.DevCA`) and the wait until it answers. Its
process's life is :class:`psmatch.devservers.process.LocalServer`'s.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from psmatch.devservers.process import LocalServer, LocalServerError, free_port
from psmatch.devservers.tls import DevCA

log = logging.getLogger(__name__)


@dataclass
class RedisServer(LocalServer):
    """Debian's ``redis-server`` on 127.0.0.1 with AOF persistence in ``data_dir``.

    With ``password``, clients must authenticate (``requirepass``); ``users`` (name ->
    password) are ACL users with every right on every key (and, without ``password``,
    the only ones who may connect). Passwords go to the server in
    a config file only its owner can read, never on a command line. With ``ca``, the
    server speaks TLS only, on ``port``, with a certificate ``ca`` signs; ``tls_auth_clients``
    is Redis's ``tls-auth-clients`` (``no``, ``optional`` or ``yes``: whether a client
    must show a certificate ``ca`` signs).
    """

    NAME = "redis-server"
    data_dir: Path
    port: int = 0
    appendonly: bool = True
    detached: bool = False
    password: str | None = field(default=None, repr=False)
    users: dict[str, str] = field(default_factory=dict, repr=False)
    ca: DevCA | None = None
    tls_auth_clients: str = "no"
    _proc: subprocess.Popen[bytes] | None = None
    _pid: int | None = None

    @classmethod
    def adopt(cls, data_dir: Path, **kwargs: Any) -> RedisServer | None:
        """The detached redis-server recorded in ``data_dir`` if it still runs, else None."""
        state = cls._recorded(data_dir, "redis-server")
        if state is None:
            return None
        return cls(data_dir, port=state["port"], detached=True, _pid=state["pid"], **kwargs)

    @property
    def url(self) -> str:
        """The server's URL, without the password (``rediss://`` with TLS)."""
        return f"{'rediss' if self.ca else 'redis'}://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 30.0) -> RedisServer:
        binary = shutil.which("redis-server") or (
            "/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists() else None
        )
        if binary is None:
            raise LocalServerError("redis-server is not installed (make deps installs it)")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        settings = {
            "bind": "127.0.0.1",
            "port": str(self.port),
            "dir": str(self.data_dir),
            "appendonly": "yes" if self.appendonly else "no",
            # always: a write is on disk before Redis acknowledges it. With everysec Redis
            # may acknowledge writes it has not yet written (it postpones the write while
            # a slow fsync runs), and a kill -9 then loses applied subscription changes
            # whose Kafka batch is already committed.
            "appendfsync": "always",
            "save": '""',
            "daemonize": "no",
            "protected-mode": "yes",
            "logfile": str(self.data_dir / "redis.log"),
        }
        if self.password:
            settings["requirepass"] = _quoted(self.password)
        client_tls: dict[str, Any] = {}
        if self.ca is not None:
            issued = self.ca.issue("redis-server", server=True)
            settings.update({"port": "0", "tls-port": str(self.port),
                             "tls-cert-file": str(issued.cert_file),
                             "tls-key-file": str(issued.key_file),
                             "tls-ca-cert-file": str(self.ca.ca_file),
                             "tls-auth-clients": self.tls_auth_clients})  # fmt: skip
            client = self.ca.issue("redis-dev-client")
            client_tls = {"ssl": True, "ssl_ca_certs": str(self.ca.ca_file),
                          "ssl_certfile": str(client.cert_file),
                          "ssl_keyfile": str(client.key_file)}  # fmt: skip
        lines = [f"{k} {v}\n" for k, v in settings.items()]
        lines += [f"user {name} on {_quoted('>' + pw)} ~* &* +@all\n"
                  for name, pw in self.users.items()]  # fmt: skip
        login: dict[str, Any] = {"password": self.password}
        if self.users and not self.password:  # the ACL users alone may connect
            lines.append("user default off\n")
            login = dict(zip(("username", "password"), next(iter(self.users.items())),
                             strict=True))  # fmt: skip
        conf = self.data_dir / "redis.conf"
        conf.touch(mode=0o600)
        conf.write_text("".join(lines))
        # redis-server's stdout is empty with a logfile: its messages go to redis.log
        self._launch([binary, str(conf)], subprocess.DEVNULL)
        # SIGTERM makes redis-server flush the AOF and exit (stop())
        import redis

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._check_alive(self.data_dir / "redis.log")
            try:
                client = redis.Redis("127.0.0.1", self.port, socket_timeout=1, **login,
                                     **client_tls)  # fmt: skip
                if client.ping():
                    log.info("Redis ready on %s (pid %s)", self.url, self.pid)
                    return self
            except redis.exceptions.RedisError:
                # BUSY loading the AOF, or not listening yet
                pass
            time.sleep(0.1)
        self.stop()
        raise LocalServerError(f"redis-server did not become ready in {timeout:.0f} s")


def _quoted(text: str) -> str:
    """``text`` as one argument of a redis.conf line."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
