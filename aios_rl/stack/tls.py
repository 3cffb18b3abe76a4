"""TLS for the embedded nats-server (``aios-rl up --tls``): a private CA and a certificate for
the server's loopback names, made once with the ``openssl`` command under
``<data_dir>/auth/tls/`` (keys 0600 in a 0700 folder). Clients trust the CA (``NATS_CA``)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from aios_rl.errors import AiosError

__all__ = ["TlsError", "TlsFiles", "ensure_tls"]


class TlsError(AiosError):
    """The certificates could not be made (no ``openssl``, or it failed)."""


class TlsFiles(NamedTuple):
    """The CA clients trust and the server's certificate and key."""

    ca: Path
    cert: Path
    key: Path


def _openssl(*args: str, cwd: Path) -> None:
    exe = shutil.which("openssl")
    if exe is None:
        raise TlsError("--tls needs the openssl command (apt-get install openssl)")
    done = subprocess.run(
        [exe, *args], cwd=cwd, capture_output=True, text=True, check=False, timeout=60
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["?"])[-1]
        raise TlsError(f"openssl {args[0]} failed: {last}")


def ensure_tls(
    folder: str | os.PathLike[str], hosts: Sequence[str] = ("127.0.0.1", "localhost")
) -> TlsFiles:
    """The CA and server certificate under ``folder`` (made the first time: EC P-256, the CA for
    ten years, the server's for 825 days, valid for ``hosts``). Raises ``TlsError``."""
    tls = Path(folder)
    tls.mkdir(parents=True, exist_ok=True, mode=0o700)
    tls.chmod(0o700)
    files = TlsFiles(tls / "ca.pem", tls / "server.pem", tls / "server.key")
    if all(f.exists() for f in files):
        return files
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "3650",
             "-subj", "/CN=aios-rl local CA", cwd=tls)  # fmt: skip
    _openssl("req", *ec, "-keyout", "server.key", "-out", "server.csr",
             "-subj", "/CN=aios-rl nats-server", cwd=tls)  # fmt: skip
    names = ",".join(f"IP:{h}" if h.replace(".", "").isdigit() else f"DNS:{h}" for h in hosts)
    (tls / "server.ext").write_text(f"subjectAltName={names}\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "server.pem", "-days", "825",
             "-extfile", "server.ext", cwd=tls)  # fmt: skip
    for key in ("ca.key", "server.key"):
        (tls / key).chmod(0o600)
    return files
