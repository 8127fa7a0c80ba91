"""SCRAM arithmetic (metadata.security.scram_types), the SASL state machine and the credential cache
(agent.sasl), on bytes and an injected clock; the SCRAM client is the `scramp` library's."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac

import pytest
from scramp import ScramClient, ScramMechanism
from skiff.agent.network.sasl import PRE_AUTH_KEYS, AuthFailed, CredentialCache, SaslState, parse_mechanisms
from skiff.metadata.security.scram_types import (
    ScramCredential,
    ScramProofError,
    check_credential,
    make_credential,
    password_matches,
    verify_client_final,
)

SALT = b"0123456789abcdef"


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_credentials_match_scramp_and_rfc_5802(mechanism: str) -> None:
    ours = make_credential("u", mechanism, "pencil", iterations=4096, salt=SALT)
    salt, stored, server, iterations = ScramMechanism(mechanism).make_auth_info("pencil", 4096, SALT)
    assert (ours.salt, ours.stored_key, ours.server_key, ours.iterations) == (
        salt,
        stored,
        server,
        iterations,
    )
    assert password_matches(ours, "pencil") and not password_matches(ours, "pencil ")


def test_rfc_7677_scram_sha_256_example() -> None:
    """RFC 7677 section 3: user "user", password "pencil", the RFC's nonces and salt."""
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    cred = make_credential("user", "SCRAM-SHA-256", "pencil", iterations=4096, salt=salt)
    first_bare = "n=user,r=rOprNGfwEbeRWgbNEkqO"
    server_first = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    final = (
        "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        "p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert verify_client_final(cred, first_bare, server_first, final) == (
        "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    )
    with pytest.raises(ScramProofError):
        verify_client_final(cred, first_bare, server_first, final.replace("p=dH", "p=dI"))
    with pytest.raises(ScramProofError, match="nonce"):
        verify_client_final(cred, first_bare, server_first, final.replace("k0,p=", "k1,p="))
    with pytest.raises(ScramProofError, match="channel binding"):
        verify_client_final(cred, first_bare, server_first, final.replace("c=biws", "c=cD10bHMtdW5pcXVlLCw="))


def test_credentials_outside_kafkas_bounds_are_refused() -> None:
    good = make_credential("u", "SCRAM-SHA-512", "p", iterations=4096)
    for bad in (
        ScramCredential("u", "SCRAM-SHA-512", good.salt, 100, good.stored_key, good.server_key),
        ScramCredential("u", "SCRAM-SHA-512", good.salt, 4096, good.stored_key[:32], good.server_key),
        ScramCredential("", "SCRAM-SHA-512", good.salt, 4096, good.stored_key, good.server_key),
        ScramCredential("u", "SCRAM-SHA-512", b"", 4096, good.stored_key, good.server_key),
    ):
        with pytest.raises(ValueError):
            check_credential(bad)
    with pytest.raises(ValueError, match="unsupported SCRAM mechanism"):
        make_credential("u", "SCRAM-MD5", "p")


class FakeMetadata:
    def __init__(self, creds: list[ScramCredential]) -> None:
        self.creds = creds
        self.calls = 0

    async def scram_credentials(self, user: str) -> list[ScramCredential]:
        self.calls += 1
        return [c for c in self.creds if c.user == user]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _state(creds: list[ScramCredential], mechanism: str) -> SaslState:
    cache = CredentialCache(FakeMetadata(creds), ttl_ms=0, monotonic=Clock())  # type: ignore[arg-type]
    state = SaslState(("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"), cache)
    state.mechanism = mechanism
    return state


ALICE = [make_credential("alice", "SCRAM-SHA-512", "secret", iterations=4096)]


def test_plain_checks_the_password_against_the_scram_credential() -> None:
    ok = _state(ALICE, "PLAIN")
    assert asyncio.run(ok.authenticate(b"\0alice\0secret")) == (b"", "User:alice")
    assert ok.authenticated and ok.allows(3)
    for token, message in (
        (b"\0alice\0wrong", "Invalid username or password"),
        (b"\0bob\0secret", "Invalid username or password"),
        (b"bob\0alice\0secret", "authorization id that is different"),
        (b"alice\0secret", "expected 3 tokens"),
        (b"\0\0secret", "username not specified"),
        (b"\0" + b"x" * 300 + b"\0secret", "Invalid username or password"),  # not asked of metadata
    ):
        state = _state(ALICE, "PLAIN")
        with pytest.raises(AuthFailed, match=message):
            asyncio.run(state.authenticate(token))
        assert not state.authenticated and not state.allows(3)
        if len(token) > 300:
            assert state.credentials.reads == 0  # a name metadata cannot hold is not looked up
    assert {18, 17, 36} == set(PRE_AUTH_KEYS)


def test_scram_exchange_with_a_real_client_and_its_failures() -> None:
    async def run(user: str, password: str, tamper: bool = False) -> str | None:
        state = _state(ALICE, "SCRAM-SHA-512")
        client = ScramClient(["SCRAM-SHA-512"], user, password)
        server_first, principal = await state.authenticate(client.get_client_first().encode())
        assert principal is None
        client.set_server_first(server_first.decode())
        final = client.get_client_final()
        if tamper:  # the nonce changed after the proof was made: the signed message differs
            final = final.replace("r=", "r=x", 1)
        server_final, principal = await state.authenticate(final.encode())
        if not tamper:
            client.set_server_final(server_final.decode())  # the agent proved it knows ServerKey
        return principal

    assert asyncio.run(run("alice", "secret")) == "User:alice"
    with pytest.raises(AuthFailed, match="invalid credentials with SASL mechanism SCRAM-SHA-512"):
        asyncio.run(run("alice", "wrong"))
    with pytest.raises(AuthFailed, match="invalid credentials"):
        asyncio.run(run("nobody", "secret"))
    with pytest.raises(AuthFailed):  # a tampered nonce changes the signed message: the proof fails
        asyncio.run(run("alice", "secret", tamper=True))
    for garbage in (b"\xff\xfe", b"hello", b"n,,n=alice", b"p=,,,"):
        with pytest.raises(AuthFailed):
            asyncio.run(_state(ALICE, "SCRAM-SHA-512").authenticate(garbage))


def test_librdkafka_repeated_client_nonce_is_accepted_as_kafka_does() -> None:
    """librdkafka (kcat, confluent-kafka) sends r=<client nonce><client nonce><server part>
    and signs that; Kafka only checks that the nonce ends with the server's."""
    cred = make_credential("alice", "SCRAM-SHA-256", "secret", iterations=4096, salt=SALT)
    first_bare = "n=alice,r=CLIENT"
    server_first = f"r=CLIENTSERVER,s={base64.b64encode(SALT).decode()},i=4096"
    without_proof = "c=biws,r=CLIENTCLIENTSERVER"
    salted = hashlib.pbkdf2_hmac("sha256", b"secret", SALT, 4096)
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    auth = f"{first_bare},{server_first},{without_proof}".encode()
    signature = hmac.new(hashlib.sha256(client_key).digest(), auth, "sha256").digest()
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature, strict=True))).decode()
    final = verify_client_final(cred, first_bare, server_first, f"{without_proof},p={proof}")
    server_key = hmac.new(salted, b"Server Key", "sha256").digest()
    assert final == "v=" + base64.b64encode(hmac.new(server_key, auth, "sha256").digest()).decode()


def test_credential_cache_reuses_for_its_ttl_then_rereads() -> None:
    md = FakeMetadata(list(ALICE))
    clock = Clock()
    cache = CredentialCache(md, ttl_ms=5_000, monotonic=clock, max_users=2)  # type: ignore[arg-type]
    assert set(asyncio.run(cache.get("alice"))) == {"SCRAM-SHA-512"}
    md.creds = []  # the user is deleted in metadata
    clock.now += 4.9
    assert set(asyncio.run(cache.get("alice"))) == {"SCRAM-SHA-512"}  # still within the bound
    clock.now += 0.2
    assert asyncio.run(cache.get("alice")) == {}  # past it: the deletion is seen
    for name in ("x", "y", "z"):
        asyncio.run(cache.get(name))
    assert len(cache._entries) == 2 and md.calls == 5


def test_enabled_mechanisms() -> None:
    assert parse_mechanisms(" plain, SCRAM-SHA-512 ") == ("PLAIN", "SCRAM-SHA-512")
    with pytest.raises(ValueError):
        parse_mechanisms(" , ")
