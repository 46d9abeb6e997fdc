"""psmatch.devservers.tls: the development CA's certificates verify as a TLS client and
server would check them (``openssl verify``), keys readable by their owner only."""

from __future__ import annotations

import shutil
import ssl
import stat
import subprocess
from pathlib import Path

import pytest

from psmatch.adapters.kafka.security import pem_keystore_problem
from psmatch.devservers.tls import DevCA

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")


def verify(ca: DevCA, cert: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["openssl", "verify", "-CAfile", str(ca.ca_file), *args, str(cert)],
                          capture_output=True, text=True, check=False)  # fmt: skip


def test_certificates_verify_for_their_use_and_not_with_another_ca(tmp_path: Path) -> None:
    ca, other = DevCA(tmp_path / "ca"), DevCA(tmp_path / "other")
    server = ca.issue("server", server=True)
    client = ca.issue("alice")
    assert verify(ca, server.cert_file, "-verify_ip", "127.0.0.1").returncode == 0
    assert verify(ca, server.cert_file, "-verify_hostname", "localhost").returncode == 0
    assert verify(ca, client.cert_file, "-purpose", "sslclient").returncode == 0
    assert verify(ca, client.cert_file, "-verify_ip", "127.0.0.1").returncode != 0  # no SAN
    assert verify(other, client.cert_file).returncode != 0
    subject = subprocess.run(["openssl", "x509", "-noout", "-subject", "-in",
                              str(client.cert_file)], capture_output=True, text=True,
                             check=True).stdout  # fmt: skip
    assert subject.strip() == "subject=CN = alice"  # the broker's principal: User:CN=alice
    for key in (server.key_file, client.key_file, client.keystore_file, ca.directory / "ca.key"):
        assert stat.S_IMODE(key.stat().st_mode) == 0o600
    # the key store is what Java's PEM key store and Python's ssl both load
    assert pem_keystore_problem(str(client.keystore_file)) is None
    ssl.create_default_context().load_cert_chain(client.keystore_file)
    # made once: a second CA object on the folder reuses the files
    again = DevCA(tmp_path / "ca").issue("alice")
    assert again.cert_file.read_bytes() == client.cert_file.read_bytes()
