"""Certificates for TLS tests, made at test time with the ``openssl`` command (present wherever Python's ``ssl``
is; no extra package): a CA, a broker certificate for ``localhost``/127.0.0.1 signed by it, a client certificate
signed by it with a password-protected key (mutual TLS), and an unrelated CA (for the wrong-CA case)."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

EC_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


@dataclass(frozen=True)
class CertificateSet:
    ca: Path
    other_ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    """Encrypted with :attr:`client_key_password`."""
    client_key_password: str


def openssl_available() -> bool:
    return shutil.which("openssl") is not None


def _openssl(*args: str, cwd: Path, env: dict[str, str] | None = None) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60,
                   env={**os.environ, **(env or {})})


def _ca(directory: Path, name: str) -> tuple[Path, Path]:
    _openssl("req", "-x509", *EC_KEY, "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2",
             "-subj", f"/CN=combee test {name}", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=directory)
    return directory / f"{name}.pem", directory / f"{name}.key"


def _signed(directory: Path, name: str, subject: str, ca: tuple[Path, Path], extensions: str) -> None:
    _openssl("req", *EC_KEY, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject, cwd=directory)
    (directory / f"{name}.ext").write_text(extensions + "\n")
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", str(ca[0]), "-CAkey", str(ca[1]), "-CAcreateserial",
             "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext", cwd=directory)


def make_certificates(directory: Path, client_key_password: str) -> CertificateSet:
    """Write the CA, broker and client certificates into ``directory`` (needs ``openssl`` on PATH)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = _ca(directory, "ca")
    other_ca = _ca(directory, "other-ca")
    _signed(directory, "server", "/CN=localhost", ca,
            "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth")
    _signed(directory, "client", "/CN=combee-worker", ca, "extendedKeyUsage=clientAuth")
    _openssl("pkey", "-in", "client.key", "-out", "client.enc.key", "-aes256", "-passout", "env:COMBEE_TEST_KEY_PASS",
             cwd=directory, env={"COMBEE_TEST_KEY_PASS": client_key_password})
    (directory / "client.key").unlink()
    return CertificateSet(ca=ca[0], other_ca=other_ca[0], server_cert=directory / "server.pem",
                            server_key=directory / "server.key", client_cert=directory / "client.pem",
                            client_key=directory / "client.enc.key", client_key_password=client_key_password)
