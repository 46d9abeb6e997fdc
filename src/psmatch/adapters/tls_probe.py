"""Telling a TLS refusal from an outage: :func:`speaks_tls` and :func:`tls_refusal`.

A plaintext client on a TLS port, and a TLS client whose certificate the server does not
accept, see only a closed connection, as in an outage; yet retrying cannot help them, so
they deserve one clear message at once. One handshake attempt tells them apart: without
verifying anything (does the server speak TLS at all?), or with the client's own
settings (what does the server say?). Each costs one TCP connection and at most
``timeout`` seconds, and runs only once a connection has failed. Imports no client
library.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Mapping
from typing import Any


def listener_kind(host: str, port: int, timeout: float = 2.0) -> str:
    """``"tls"`` if ``host:port`` answers a TLS ClientHello with a TLS handshake (or a TLS
    alert), ``"plaintext"`` if it accepts the connection but answers in something else
    or closes it, ``"closed"`` if it does not accept connections (or does not answer)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # only the protocol matters here
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except OSError:
        return "closed"
    try:
        with context.wrap_socket(sock, server_hostname=host):
            return "tls"
    except ssl.SSLError as exc:
        return "tls" if "ALERT" in str(exc).upper() else "plaintext"
    except TimeoutError:
        return "closed"  # no answer at all: a hung server, not a protocol
    except OSError:
        return "plaintext"  # closed or reset on seeing TLS
    finally:
        sock.close()


def speaks_tls(host: str, port: int, timeout: float = 2.0) -> bool:
    """Whether ``host:port`` is a TLS listener (:func:`listener_kind`)."""
    return listener_kind(host, port, timeout) == "tls"


def host_port(address: str, default_port: int) -> tuple[str, int]:
    """``host:port`` (``[v6]:port``), or ``host`` alone with ``default_port``, as a pair."""
    host, sep, port = address.strip().rpartition(":")
    if sep and port.isdigit():
        return host.strip("[]"), int(port)
    return address.strip().strip("[]"), default_port


def tls_refusal(host: str, port: int, context: ssl.SSLContext, timeout: float = 2.0) -> str | None:
    """Why a TLS connection to ``host:port`` with ``context`` (the client's own CA,
    certificate and checks) fails, if it is TLS that fails: the handshake's error (the
    server's certificate not verified) or the alert the server sends once the handshake
    is over (it does not accept the client's certificate, TLS 1.3). ``None`` when the
    server accepts the connection or cannot be reached at all (an outage, not a
    refusal)."""
    try:
        with (
            socket.create_connection((host, port), timeout=timeout) as sock,
            context.wrap_socket(sock, server_hostname=host) as tls,
        ):
            tls.settimeout(min(timeout, 0.5))
            tls.recv(1)  # a refusing server's alert arrives here; an accepting one is silent
    except ssl.SSLError as exc:
        return exc.reason or str(exc)
    except OSError:
        pass
    return None


def redis_tls_refusal(kwargs: Mapping[str, Any], tls: bool) -> str | None:
    """Why a Redis server refuses a client made with redis-py's connection ``kwargs``
    (``tls``: an ``SSLConnection``), if it is its TLS or its lack of TLS; ``None`` if
    that is not why a connection failed (a unix socket: never)."""
    if "host" not in kwargs:
        return None
    host, port = kwargs["host"], int(kwargs.get("port", 6379))
    if not tls:
        if speaks_tls(host, port):
            return "speaks TLS: give a rediss:// redis_url (and redis_ca_file)"
        return None
    context = ssl.create_default_context(cafile=kwargs.get("ssl_ca_certs"))
    context.check_hostname = bool(kwargs.get("ssl_check_hostname", True))
    if kwargs.get("ssl_certfile"):
        context.load_cert_chain(kwargs["ssl_certfile"], kwargs.get("ssl_keyfile"))
    reason = tls_refusal(host, port, context)
    if reason is not None:
        return (f"refused the TLS connection ({reason}): check redis_ca_file (the CA that "
                "signed the server's certificate) and redis_cert_file with redis_key_file "
                "(a client certificate the server trusts)")
    if _answers_plain_redis(host, port):
        return "does not speak TLS: give a redis:// redis_url, not rediss://"
    return None


def _answers_plain_redis(host: str, port: int, timeout: float = 2.0) -> bool:
    """Whether ``host:port`` answers a plaintext ``PING`` as Redis does (``+PONG``, or an
    error such as ``-NOAUTH``)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(1) in (b"+", b"-")
    except OSError:
        return False
