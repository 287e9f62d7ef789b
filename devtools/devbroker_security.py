"""The dev broker's ``sasl_ssl`` security: a CA and broker certificate, SCRAM users, the authorizer.

``parsley-devbroker up --security sasl_ssl`` runs its broker(s) with:

* TLS on the client listener: a CA and one broker certificate (for ``127.0.0.1`` and
  ``localhost``), made here with the ``cryptography`` package and written as PEM, which
  both Kafka (PEM key and trust stores, KIP-651) and librdkafka (``ssl.ca.location``)
  read as they are: no keytool, no JKS passwords;
* SASL/SCRAM-SHA-512 on that listener, brokers included (the super user ``admin``,
  whose credential ``kafka-storage format --add-scram`` writes into the metadata log,
  KIP-900); the KRaft controller listener, on the loopback only, uses SASL/PLAIN for the
  same ``admin`` (KRaft controllers cannot use SCRAM);
* ``StandardAuthorizer`` with ``allow.everyone.if.no.acl.found=false``: a principal other
  than ``admin`` may do only what an ACL grants.

It writes, in the data directory, ``security/`` (the CA, its key, the broker's key and
chain, mode 0600 for keys and passwords), ``admin.properties`` (for Kafka's CLI tools:
``--command-config``) and ``admin.client.json`` (confluent-kafka properties for ``admin``,
without ``bootstrap.servers``, so they may be given as Parsley's ``kafka_properties``).
:func:`create_user` adds a SCRAM user and writes ``users/<name>.client.json``.

Source: docs/operations.md, "Production clusters"; Kafka's documentation, "Security"
(SASL/SCRAM, "Authorization and ACLs").
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from devtools.kafka_jars import DevBrokerError

__all__ = [
    "ADMIN_USER",
    "SASL_SSL",
    "SCRAM_MECHANISM",
    "SECURITY_MODES",
    "Security",
    "create_user",
    "ensure_security",
    "load_security",
]

PLAINTEXT: Final = "plaintext"
SASL_SSL: Final = "sasl_ssl"
SECURITY_MODES: Final = (PLAINTEXT, SASL_SSL)
"""What ``up --security`` accepts."""
ADMIN_USER: Final = "admin"
"""The super user (``super.users=User:admin``); the brokers authenticate as it too."""
SCRAM_MECHANISM: Final = "SCRAM-SHA-512"
AUTHORIZER: Final = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
SECURITY_DIR: Final = "security"
ADMIN_PROPERTIES: Final = "admin.properties"
ADMIN_CLIENT_JSON: Final = "admin.client.json"
USERS_DIR: Final = "users"
CERT_DAYS: Final = 825
"""Validity of the generated certificates, days (a dev broker's data outlives no such span)."""


def _jaas(module: str, user: str, password: str, extra: str = "") -> str:
    return f'{module} required username="{user}" password="{password}"{extra};'


_SCRAM_MODULE: Final = "org.apache.kafka.common.security.scram.ScramLoginModule"
_PLAIN_MODULE: Final = "org.apache.kafka.common.security.plain.PlainLoginModule"


@dataclass(frozen=True, slots=True)
class Security:
    """The ``sasl_ssl`` material of one data directory (see the module docstring).

    Attributes:
        data_dir: the data directory (of the whole cluster).
        ca_path: the CA certificate, PEM: clients trust it.
        keystore_path: the broker's private key (PKCS#8, unencrypted) and certificate
            chain, PEM; mode 0600.
        admin_password: the password of :data:`ADMIN_USER` (SCRAM and the controller's PLAIN).
    """

    data_dir: Path
    ca_path: Path
    keystore_path: Path
    admin_password: str

    def broker_settings(self, port: int, controller_port: int) -> dict[str, str]:
        """``server.properties`` entries for a secured node (listeners on 127.0.0.1).

        Args:
            port: the client (``SASL_SSL``) port, also the inter-broker listener.
            controller_port: the KRaft controller (``SASL_PLAINTEXT``, PLAIN) port.
        """
        admin_scram = _jaas(_SCRAM_MODULE, ADMIN_USER, self.admin_password)
        admin_plain = _jaas(_PLAIN_MODULE, ADMIN_USER, self.admin_password,
                            f' user_{ADMIN_USER}="{self.admin_password}"')
        return {
            "listeners": f"SASL_SSL://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
            "advertised.listeners": f"SASL_SSL://127.0.0.1:{port}",
            "inter.broker.listener.name": "SASL_SSL",
            "listener.security.protocol.map": "CONTROLLER:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
            "sasl.enabled.mechanisms": SCRAM_MECHANISM,
            "sasl.mechanism.inter.broker.protocol": SCRAM_MECHANISM,
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": admin_scram,
            "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.controller.plain.sasl.jaas.config": admin_plain,
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.keystore_path),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca_path),
            "ssl.client.auth": "none",
            "authorizer.class.name": AUTHORIZER,
            "allow.everyone.if.no.acl.found": "false",
            "super.users": f"User:{ADMIN_USER}",
        }

    def format_args(self) -> list[str]:
        """``kafka-storage format`` arguments that create the ``admin`` SCRAM credential."""
        return ["--add-scram",
                f"{SCRAM_MECHANISM}=[name={ADMIN_USER},password={self.admin_password}]"]

    def client_config(self, user: str = ADMIN_USER, password: str | None = None) -> dict[str, str]:
        """confluent-kafka properties for ``user`` (``admin`` by default), no bootstrap."""
        return {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": SCRAM_MECHANISM,
            "sasl.username": user,
            "sasl.password": self.admin_password if password is None else password,
            "ssl.ca.location": str(self.ca_path),
        }

    def java_client_properties(self) -> str:
        """``admin.properties``: the Java clients' (Kafka's CLI tools') settings for ``admin``."""
        lines = [
            "# written by parsley-devbroker: kafka-* tools --command-config <this file>",
            "security.protocol=SASL_SSL",
            f"sasl.mechanism={SCRAM_MECHANISM}",
            "sasl.jaas.config=" + _jaas(_SCRAM_MODULE, ADMIN_USER, self.admin_password),
            "ssl.truststore.type=PEM",
            f"ssl.truststore.location={self.ca_path}",
        ]
        return "\n".join(lines) + "\n"


def _write_private(path: Path, data: bytes | str) -> None:
    """Write ``path`` readable by its owner only (created 0600, never wider)."""
    raw = data.encode() if isinstance(data, str) else data
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(raw)
    os.chmod(path, 0o600)


def _certificates(directory: Path) -> None:
    """Make ``ca.pem``, ``ca.key`` and ``broker.pem`` (key + chain) in ``directory``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)
    until = now + datetime.timedelta(days=CERT_DAYS)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "parsley-devbroker CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(
            digital_signature=True, key_cert_sign=True, crl_sign=True,
            content_commitment=False, key_encipherment=False, data_encipherment=False,
            key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "parsley-devbroker")]))
        .issuer_name(ca_name).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(until)
        .add_extension(x509.SubjectAlternativeName([
            x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        # The brokers are each other's clients too (inter-broker SASL_SSL).
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                              ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    pkcs8 = serialization.PrivateFormat.PKCS8
    clear = serialization.NoEncryption()
    (directory / "ca.pem").write_bytes(ca_cert.public_bytes(pem))
    _write_private(directory / "ca.key", ca_key.private_bytes(pem, pkcs8, clear))
    _write_private(directory / "broker.pem", key.private_bytes(pem, pkcs8, clear)
                   + cert.public_bytes(pem) + ca_cert.public_bytes(pem))


def load_security(data_dir: Path) -> Security | None:
    """The ``sasl_ssl`` material of ``data_dir``, or None when it has none (plaintext)."""
    directory = data_dir / SECURITY_DIR
    password = directory / "admin.password"
    if not password.exists():
        return None
    return Security(data_dir=data_dir, ca_path=directory / "ca.pem",
                    keystore_path=directory / "broker.pem",
                    admin_password=password.read_text().strip())


def ensure_security(data_dir: Path) -> Security:
    """Create the ``sasl_ssl`` material of ``data_dir`` unless present; return it.

    Writes ``security/`` (CA, broker key and chain, the admin password),
    ``admin.properties`` and ``admin.client.json`` (see the module docstring).

    Raises:
        DevBrokerError: the ``cryptography`` package is missing.
    """
    found = load_security(data_dir)
    if found is None:
        try:
            import cryptography  # noqa: F401
        except ImportError as exc:
            raise DevBrokerError(
                "--security sasl_ssl needs the 'cryptography' package: pip install cryptography"
            ) from exc
        directory = data_dir / SECURITY_DIR
        directory.mkdir(parents=True, exist_ok=True)
        _certificates(directory)
        _write_private(directory / "admin.password", secrets.token_urlsafe(18) + "\n")
        found = load_security(data_dir)
        assert found is not None
    _write_private(data_dir / ADMIN_PROPERTIES, found.java_client_properties())
    _write_private(data_dir / ADMIN_CLIENT_JSON,
                   json.dumps(found.client_config(), indent=2, sort_keys=True) + "\n")
    return found


def create_user(
    security: Security, bootstrap: str, name: str, password: str | None = None,
    *, timeout_s: float = 30.0,
) -> dict[str, str]:
    """Create (or reset) the SCRAM-SHA-512 user ``name`` as ``admin``; return its client config.

    The config (confluent-kafka properties, no ``bootstrap.servers``) is also written to
    ``<data_dir>/users/<name>.client.json``. Returns once a client of the new user
    authenticates (its credential has reached the broker answering).

    Args:
        security: the data directory's material (:func:`load_security`).
        bootstrap: ``host:port[,...]`` of the secured broker(s).
        name: the user name (the principal is ``User:<name>``).
        password: its password; default a random one.
        timeout_s: overall deadline, seconds.

    Raises:
        DevBrokerError: the broker refused the credential or the user could not log in.
    """
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    secret = password or secrets.token_urlsafe(12)
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0,
                         **security.client_config()})
    upsert = UserScramCredentialUpsertion(
        name, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), secret.encode())
    try:
        for future in admin.alter_user_scram_credentials([upsert],
                                                         request_timeout=timeout_s).values():
            future.result(timeout=timeout_s + 5)
    except KafkaException as exc:
        raise DevBrokerError(f"could not create SCRAM user {name!r}: {exc}") from exc
    config = security.client_config(name, secret)
    _await_login(bootstrap, config, name, timeout_s)
    users = security.data_dir / USERS_DIR
    users.mkdir(exist_ok=True)
    _write_private(users / f"{name}.client.json",
                   json.dumps(config, indent=2, sort_keys=True) + "\n")
    return config


def _await_login(bootstrap: str, config: Mapping[str, Any], name: str, timeout_s: float) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        client = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0, **config})
        try:
            client.describe_cluster(request_timeout=5).result(timeout=10)
            return
        except KafkaException as exc:
            last = exc
        time.sleep(0.3)
    raise DevBrokerError(f"user {name!r} could not log in within {timeout_s:.0f} s: {last}")
