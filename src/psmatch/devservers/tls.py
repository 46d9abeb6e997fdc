"""A throwaway certificate authority for the development servers: :class:`DevCA`.

Owns making, with the ``openssl`` command, a CA and the certificates it signs: server
certificates valid for ``127.0.0.1`` and ``localhost`` (they pass host name checks) and
client certificates (their subject is the principal a broker sees, ``User:CN=<name>``).
Every key is an unencrypted PKCS#8 PEM file readable by its owner only, with a PEM key
store beside it (the certificate followed by the key, what Kafka's ``ssl.keystore.type
=PEM`` reads). Each certificate costs one RSA key generation (tens of milliseconds).
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from psmatch.devservers.process import LocalServerError


@dataclass(frozen=True, slots=True)
class Issued:
    """A certificate signed by a :class:`DevCA`: its PEM files."""

    cert_file: Path
    key_file: Path
    keystore_file: Path  # the certificate, then the key: a PEM key store


class DevCA:
    """A CA in ``directory`` (made at first use, reused after): ``ca.pem`` verifies
    every certificate :meth:`issue` signs."""

    def __init__(self, directory: Path, name: str = "psmatch-dev-ca") -> None:
        self.directory = directory
        self.ca_file = directory / "ca.pem"
        self._ca_key = directory / "ca.key"
        if not self.ca_file.exists():
            directory.mkdir(parents=True, exist_ok=True)
            self._ca_key.touch(mode=0o600)
            _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30",
                     "-subj", f"/CN={name}", "-keyout", str(self._ca_key),
                     "-out", str(self.ca_file))  # fmt: skip

    def issue(self, name: str, cn: str | None = None, server: bool = False) -> Issued:
        """The certificate ``<name>.pem`` (subject ``CN=<cn or name>``) and its key,
        made at first use; ``server``: valid for 127.0.0.1 and localhost."""
        cert, key = self.directory / f"{name}.pem", self.directory / f"{name}.key"
        keystore = self.directory / f"{name}.keystore.pem"
        if not keystore.exists():
            csr = self.directory / f"{name}.csr"
            ext = self.directory / f"{name}.ext"
            ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n" if server else
                           "extendedKeyUsage=clientAuth\n")  # fmt: skip
            key.touch(mode=0o600)
            _openssl("req", "-new", "-newkey", "rsa:2048", "-nodes", "-subj",
                     f"/CN={cn or name}", "-keyout", str(key), "-out", str(csr))  # fmt: skip
            _openssl("x509", "-req", "-in", str(csr), "-CA", str(self.ca_file), "-CAkey",
                     str(self._ca_key), "-CAcreateserial", "-days", "30", "-extfile",
                     str(ext), "-out", str(cert))  # fmt: skip
            keystore.touch(mode=0o600)
            keystore.write_text(cert.read_text() + key.read_text())
            csr.unlink()
            ext.unlink()
        return Issued(cert, key, keystore)


def _openssl(*args: str) -> None:
    binary = shutil.which("openssl")
    if binary is None:
        raise LocalServerError("openssl is not installed (the TLS development servers need it)")
    done = subprocess.run([binary, *args], capture_output=True, text=True, check=False)
    if done.returncode:
        raise LocalServerError(f"openssl {args[0]} failed: {done.stderr.strip()[-1000:]}")
