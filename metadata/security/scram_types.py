"""SCRAM credentials as metadata stores them (RFC 5802 section 3, Kafka's KIP-554), and the
pure arithmetic that derives them.

A credential is (salt, iterations, StoredKey, ServerKey) for one user and one mechanism:

    SaltedPassword = PBKDF2-HMAC-H(password, salt, iterations)
    ClientKey      = HMAC-H(SaltedPassword, "Client Key")
    StoredKey      = H(ClientKey)
    ServerKey      = HMAC-H(SaltedPassword, "Server Key")

with H = SHA-256 for SCRAM-SHA-256 and SHA-512 for SCRAM-SHA-512. The password is never
stored: a SCRAM exchange proves knowledge of ClientKey against StoredKey, and SASL/PLAIN is
checked by deriving StoredKey from the offered password with the stored salt and iterations.
Kafka's AlterUserScramCredentials sends SaltedPassword (the client salts), so
`keys_from_salted_password` is the server's half.

Iterations are bounded as in Kafka (4096..16384): fewer is weak, more lets one PLAIN login
cost the agent a lot of CPU.

No I/O and no database here: the HTTP client, the agent and the CLI import this module.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from dataclasses import dataclass
from typing import Annotated

from annotated_types import Interval, Len, MaxLen

SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
# Kafka's wire codes for the mechanisms (DescribeUserScramCredentials, AlterUserScramCredentials).
MECHANISM_CODES: dict[str, int] = {SCRAM_SHA_256: 1, SCRAM_SHA_512: 2}
MECHANISMS_BY_CODE: dict[int, str] = {v: k for k, v in MECHANISM_CODES.items()}
_HASHES = {SCRAM_SHA_256: "sha256", SCRAM_SHA_512: "sha512"}

MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 8192
SALT_BYTES = 32
MAX_SALT_BYTES = 1024
MAX_USER_NAME_CHARS = 255


@dataclass(frozen=True)
class ScramCredential:
    user: Annotated[str, Len(1, MAX_USER_NAME_CHARS)]
    mechanism: Annotated[str, Len(1, 32)]
    salt: Annotated[bytes, MaxLen(MAX_SALT_BYTES)]
    iterations: Annotated[int, Interval(ge=0, le=2**31 - 1)]
    stored_key: Annotated[bytes, MaxLen(128)]
    server_key: Annotated[bytes, MaxLen(128)]


@dataclass(frozen=True)
class ScramCredentialInfo:
    """What describing a credential shows: never the salt or the keys."""

    user: str
    mechanism: str
    iterations: int


def hash_name(mechanism: str) -> str:
    try:
        return _HASHES[mechanism]
    except KeyError:
        raise ValueError(f"unsupported SCRAM mechanism {mechanism!r} (use {' or '.join(_HASHES)})") from None


def digest_bytes(mechanism: str) -> int:
    return hashlib.new(hash_name(mechanism)).digest_size


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(hash_name(mechanism), password.encode("utf-8"), salt, iterations)


def keys_from_salted_password(mechanism: str, salted: bytes) -> tuple[bytes, bytes]:
    """(StoredKey, ServerKey) from SaltedPassword."""
    h = hash_name(mechanism)
    client_key = hmac.new(salted, b"Client Key", h).digest()
    stored_key = hashlib.new(h, client_key).digest()
    server_key = hmac.new(salted, b"Server Key", h).digest()
    return stored_key, server_key


def make_credential(
    user: str,
    mechanism: str,
    password: str,
    *,
    iterations: int = DEFAULT_ITERATIONS,
    salt: bytes | None = None,
) -> ScramCredential:
    """A new credential for `password` (a random salt unless one is given)."""
    salt = os.urandom(SALT_BYTES) if salt is None else salt
    stored, server = keys_from_salted_password(
        mechanism, salted_password(mechanism, password, salt, iterations)
    )
    cred = ScramCredential(user, mechanism, salt, iterations, stored, server)
    check_credential(cred)
    return cred


def password_matches(cred: ScramCredential, password: str) -> bool:
    """SASL/PLAIN against a SCRAM credential: derive StoredKey from `password` with the
    stored salt and iterations and compare in constant time."""
    salted = salted_password(cred.mechanism, password, cred.salt, cred.iterations)
    stored, _ = keys_from_salted_password(cred.mechanism, salted)
    return hmac.compare_digest(stored, cred.stored_key)


def check_user_name(user: str) -> None:
    if not user or len(user) > MAX_USER_NAME_CHARS:
        raise ValueError(f"a user name must have 1 to {MAX_USER_NAME_CHARS} characters")


def check_iterations(iterations: int) -> None:
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"iterations must be in [{MIN_ITERATIONS}, {MAX_ITERATIONS}], got {iterations}")


def check_credential(cred: ScramCredential) -> None:
    """ValueError with a message if the credential cannot be stored."""
    check_user_name(cred.user)
    size = digest_bytes(cred.mechanism)
    check_iterations(cred.iterations)
    if not 1 <= len(cred.salt) <= MAX_SALT_BYTES:
        raise ValueError(f"the salt must have 1 to {MAX_SALT_BYTES} bytes")
    if len(cred.stored_key) != size or len(cred.server_key) != size:
        raise ValueError(f"{cred.mechanism} keys have {size} bytes")


class ScramProofError(ValueError):
    """The client-final message does not prove the password (or is malformed)."""


def verify_client_final(
    cred: ScramCredential, client_first_bare: str, server_first: str, client_final: str
) -> str:
    """Check a SCRAM client-final message (RFC 5802 section 3) against the stored keys and
    return the server-final message (`v=ServerSignature`).

    AuthMessage = client-first-bare "," server-first "," client-final-without-proof;
    ClientSignature = HMAC(StoredKey, AuthMessage); the proof XOR ClientSignature must hash
    to StoredKey. The nonce must *end with* the server's (Kafka's ScramSaslServer accepts
    that too: librdkafka up to 2.x repeats its client nonce in front of the combined one).
    Channel binding: only `c=biws` / `c=eSws` (gs2 headers "n,," / "y,,", no binding)."""
    server_nonce = next((p[2:] for p in server_first.split(",") if p.startswith("r=")), "")
    if not server_nonce:
        raise ScramProofError("no nonce in the server-first message")
    attrs: dict[str, str] = {}
    for part in client_final.split(","):
        key, eq, value = part.partition("=")
        if not eq or len(key) != 1 or key in attrs:
            raise ScramProofError("malformed client-final message")
        attrs[key] = value
    if not client_final.endswith(",p=" + attrs.get("p", "\0")) or "r" not in attrs or "c" not in attrs:
        raise ScramProofError("malformed client-final message")
    if attrs["c"] not in ("biws", "eSws"):
        raise ScramProofError("channel binding is not supported")
    if not attrs["r"].endswith(server_nonce):
        raise ScramProofError("nonce mismatch")
    try:
        proof = base64.b64decode(attrs["p"], validate=True)
    except (binascii.Error, ValueError):
        raise ScramProofError("malformed proof") from None
    h = hash_name(cred.mechanism)
    without_proof = client_final[: -len(",p=" + attrs["p"])]
    auth_message = f"{client_first_bare},{server_first},{without_proof}".encode()
    client_signature = hmac.new(cred.stored_key, auth_message, h).digest()
    if len(proof) != len(client_signature):
        raise ScramProofError("malformed proof")
    client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
    if not hmac.compare_digest(hashlib.new(h, client_key).digest(), cred.stored_key):
        raise ScramProofError("invalid proof")
    server_signature = hmac.new(cred.server_key, auth_message, h).digest()
    return "v=" + base64.b64encode(server_signature).decode("ascii")
