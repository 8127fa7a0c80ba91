"""Test certificates, made at test time with `cryptography` into a temporary directory.

`make_pki(dir)` writes a CA, a server certificate for 127.0.0.1/localhost signed by it, a
client certificate (subject `CN=alice,OU=eng,O=Skiff`) signed by it, and a client
certificate signed by another CA (which the agent must not accept), all PEM, keys
unencrypted. EC P-256 keys: fast to make.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CLIENT_SUBJECT = "CN=alice,OU=eng,O=Skiff"


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    rogue_client_cert: Path  # signed by a CA the agent does not trust
    rogue_client_key: Path


def _name(**parts: str) -> x509.Name:
    oids = {"CN": NameOID.COMMON_NAME, "OU": NameOID.ORGANIZATIONAL_UNIT_NAME, "O": NameOID.ORGANIZATION_NAME}
    # x509 names list the least specific part first: O, OU, CN
    return x509.Name([x509.NameAttribute(oids[k], v) for k, v in reversed(list(parts.items()))])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> Path:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return path


def _cert(
    subject: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey,
    *,
    ca: bool = False,
    server: bool = False,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    b = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        b = b.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        b = b.add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    else:
        b = b.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), critical=False
        )
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        b = b.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if server:
        b = b.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    return b.sign(issuer_key, hashes.SHA256())


def _pem(cert: x509.Certificate, path: Path) -> Path:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name(CN="Skiff test CA", O="Skiff")
    ca = _cert(ca_name, ca_key, ca_name, ca_key, ca=True)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = _cert(_name(CN="localhost", O="Skiff"), server_key, ca_name, ca_key, server=True)
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = _cert(_name(CN="alice", OU="eng", O="Skiff"), client_key, ca_name, ca_key)
    rogue_ca_key = ec.generate_private_key(ec.SECP256R1())
    rogue_ca_name = _name(CN="Rogue CA", O="Elsewhere")
    rogue_key = ec.generate_private_key(ec.SECP256R1())
    rogue = _cert(_name(CN="mallory", O="Elsewhere"), rogue_key, rogue_ca_name, rogue_ca_key)
    return Pki(
        ca=_pem(ca, directory / "ca.pem"),
        server_cert=_pem(server, directory / "server.pem"),
        server_key=_write_key(server_key, directory / "server.key"),
        client_cert=_pem(client, directory / "client.pem"),
        client_key=_write_key(client_key, directory / "client.key"),
        rogue_client_cert=_pem(rogue, directory / "rogue.pem"),
        rogue_client_key=_write_key(rogue_key, directory / "rogue.key"),
    )
