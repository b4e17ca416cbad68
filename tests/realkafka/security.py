"""TLS material and SASL/SCRAM settings for a secured real cluster, made fresh for each run.

A CA of the run signs one server certificate for 127.0.0.1 (subject alternative name IP and
DNS ``localhost``); nothing is committed, everything lives in the cluster's folder and goes with
it. The brokers load PEM files (``ssl.keystore.type=PEM``); clients trust ``ca.pem``.

The secured listener is ``SASL_SSL`` with SCRAM-SHA-512. Brokers talk to each other and to the
controller on PLAINTEXT listeners whose principal, ``User:ANONYMOUS``, is a super user together
with the harness's own ``User:admin``: the plaintext ports are the operator's side door of a test
cluster, and every test of rights goes through the secured one. The KRaft ``StandardAuthorizer``
runs on every node, with no ACL meaning no access.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.realkafka.jars import Unavailable

ADMIN_USER = "admin"
ADMIN_PASSWORD = "admin-secret-of-the-run"
MECHANISM = "SCRAM-SHA-512"
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


@dataclass(frozen=True, slots=True, kw_only=True)
class Tls:
    ca_pem: Path  # what clients trust
    broker_pem: Path  # the brokers' private key (PKCS#8) followed by their certificate


def _openssl(*args: str, cwd: Path) -> None:
    done = subprocess.run(
        ["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed: {done.stderr.strip()[-500:]}")


def make_tls(folder: Path) -> Tls:
    """A CA and a server certificate for 127.0.0.1, valid for two days."""
    if shutil.which("openssl") is None:
        raise Unavailable(
            "the secured cluster makes its certificates with `openssl`, which is not on PATH "
            "(e.g. `apt install openssl`)"
        )
    folder.mkdir(parents=True, exist_ok=True)
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        "-keyout", "ca.key", "-out", "ca.pem", "-subj", "/CN=failover-partitioner test CA",
        cwd=folder,
    )  # fmt: skip
    (folder / "san.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "broker.key", "-out", "broker.csr",
        "-subj", "/CN=localhost",
        cwd=folder,
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "2", "-out", "broker.crt", "-extfile", "san.cnf",
        cwd=folder,
    )  # fmt: skip
    broker_pem = folder / "broker.pem"
    broker_pem.write_text((folder / "broker.key").read_text() + (folder / "broker.crt").read_text())
    return Tls(ca_pem=folder / "ca.pem", broker_pem=broker_pem)


def node_settings() -> dict[str, str]:
    """What every node (controller and brokers) of a secured cluster adds."""
    return {
        "authorizer.class.name": AUTHORIZER,
        "super.users": f"User:ANONYMOUS;User:{ADMIN_USER}",
        "allow.everyone.if.no.acl.found": "false",
    }


def listener_settings(tls: Tls) -> dict[str, str]:
    """What a broker adds for its SASL_SSL listener (the listener itself is named by the caller)."""
    prefix = "listener.name.sasl_ssl."
    return {
        "sasl.enabled.mechanisms": MECHANISM,
        f"{prefix}sasl.enabled.mechanisms": MECHANISM,
        f"{prefix}scram-sha-512.sasl.jaas.config": (
            "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        ),
        f"{prefix}ssl.keystore.type": "PEM",
        f"{prefix}ssl.keystore.location": str(tls.broker_pem),
    }


def confluent_settings(tls: Tls, user: str, password: str) -> dict[str, str]:
    """A confluent-kafka client's settings for SCRAM over TLS, as a user writes them."""
    return {
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": MECHANISM,
        "sasl.username": user,
        "sasl.password": password,
        "ssl.ca.location": str(tls.ca_pem),
    }
