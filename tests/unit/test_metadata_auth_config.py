"""The pure parts of metadata authentication: the tokens file, role declarations, the
exposure warnings, client credentials from settings and environment (agent, Spark), and
the readiness probe's timeout and single flight."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from fastapi.routing import APIRoute
from skiff.agent.config import AgentConfig
from skiff.metadata.server.auth import (
    RoleRequirement,
    TokenConfigError,
    TokenTable,
    allow,
    allowed_roles,
    exposure_warnings,
    is_loopback,
    load_tokens,
    public,
)
from skiff.metadata.server.health import ReadinessProbe
from skiff.metadata.wire.credentials import CredentialsError, resolve_credentials
from skiff.metadata.wire.roles import ADMIN, AGENT, COMPACTOR, READER
from skiff.spark.options import SkiffOptionError, parse_options
from skiff.spark.planner import SkiffSourceError, metadata_client

A = "a" * 32
B = "b" * 32
C = "c-c.c_c~c+c/c=" + "c" * 10


# ------------------------------------------------------------------ tokens file


def test_tokens_file_roles_comments_and_union() -> None:
    table = TokenTable.parse(
        f"# agents\nagent:{A}  # the agents\n\n  compactor,reader:{B}  \nadmin:{C}\ncompactor:{A}\n", "tokens"
    )
    assert len(table) == 3
    assert table.roles_for(A) == {AGENT, COMPACTOR}  # the same token on two lines: both roles
    assert table.roles_for(B) == {COMPACTOR, READER}
    assert table.roles_for(C) == {ADMIN}
    assert table.roles_for("a" * 31) is None
    assert table.roles_for(A + "x") is None
    assert table.roles_for("") is None


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (f"agnet:{A}", "unknown role"),
        (f"{A}:agent", "unknown role"),  # swapped: the token must not be echoed
        (A, "expected ROLE"),
        ("agent:", "expected ROLE"),
        ("agent:short-secret", "at least 16"),
        (f"agent:{A}\u00e9", "printable ASCII"),
        (":" + A, "unknown role"),
        ("# only a comment\n\n", "holds no token"),
        ("", "holds no token"),
    ],
)
def test_malformed_tokens_are_refused_without_echoing_them(text: str, fragment: str) -> None:
    with pytest.raises(TokenConfigError) as e:
        TokenTable.parse(text, "/etc/skiff/tokens")
    assert fragment in str(e.value)
    assert A not in str(e.value) and "short-secret" not in str(e.value)


def test_load_tokens_from_file_or_variable(tmp_path: Path) -> None:
    f = tmp_path / "tokens"
    f.write_text(f"reader:{A}\n")
    assert load_tokens(None, env={}) is None  # nothing configured: open
    from_flag = load_tokens(str(f), env={})
    assert from_flag is not None and from_flag.roles_for(A) == {READER}
    from_env_file = load_tokens(None, env={"SKIFF_METADATA_TOKENS_FILE": str(f)})
    assert from_env_file is not None and from_env_file.roles_for(A) == {READER}
    inline = load_tokens(None, env={"SKIFF_METADATA_TOKENS": f"agent:{A} admin:{B}"})
    assert inline is not None and inline.roles_for(B) == {ADMIN} and inline.roles_for(A) == {AGENT}
    with pytest.raises(TokenConfigError, match="not both"):
        load_tokens(str(f), env={"SKIFF_METADATA_TOKENS": f"agent:{A}"})
    with pytest.raises(TokenConfigError, match="cannot read"):
        load_tokens(str(tmp_path / "missing"), env={})
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(TokenConfigError, match="no token"):
        load_tokens(str(tmp_path / "empty"), env={})


# ------------------------------------------------------------------ declarations


def _route(*deps: object) -> APIRoute:
    def endpoint() -> None:
        return None

    return APIRoute("/x", endpoint, dependencies=list(deps))  # type: ignore[arg-type]


def test_declared_roles_and_admin_only_default() -> None:
    assert allowed_roles(_route()) == {ADMIN}
    assert allowed_roles(_route(allow(AGENT))) == {AGENT, ADMIN}
    assert allowed_roles(_route(allow(AGENT, READER), allow(READER, COMPACTOR))) == {READER, ADMIN}
    assert allowed_roles(_route(public())) is None
    # public next to a role declaration does not open the route
    assert allowed_roles(_route(public(), allow(AGENT))) == {AGENT, ADMIN}
    with pytest.raises(ValueError):
        allow("superuser")
    with pytest.raises(ValueError):
        allow()
    assert repr(RoleRequirement(frozenset({AGENT}))) == "allow(agent)"


def test_exposure_warnings() -> None:
    for host in ("127.0.0.1", "localhost", "::1", "[::1]", "127.1.2.3"):
        assert is_loopback(host)
        assert exposure_warnings(host, auth_enabled=False, tls=False) == []
    for host in ("0.0.0.0", "::", "10.1.2.3", "metadata.example"):
        assert not is_loopback(host)
        (open_warning,) = exposure_warnings(host, auth_enabled=False, tls=False)
        assert "without authentication" in open_warning and "--tokens-file" in open_warning
        (clear_warning,) = exposure_warnings(host, auth_enabled=True, tls=False)
        assert "clear text" in clear_warning
        assert exposure_warnings(host, auth_enabled=True, tls=True) == []


# ------------------------------------------------------------------ client credentials


def test_credentials_explicit_beat_environment(tmp_path: Path) -> None:
    f = tmp_path / "token"
    f.write_text(f"  {B}\n")
    env = {"SKIFF_METADATA_TOKEN": A, "SKIFF_METADATA_CA_FILE": "/env/ca.pem"}
    assert resolve_credentials(env=env).token == A
    assert resolve_credentials(env=env).ca_file == "/env/ca.pem"
    assert resolve_credentials(token_file=str(f), env=env).token == B  # explicit file beats env token
    assert resolve_credentials(token=C, ca_file="/x.pem", env=env).token == C
    assert resolve_credentials(env={"SKIFF_METADATA_TOKEN_FILE": str(f)}).token == B
    assert resolve_credentials(env={}).token is None
    assert resolve_credentials(env={}).headers() == {}
    assert resolve_credentials(token=A, env={}).headers() == {"authorization": f"Bearer {A}"}
    assert A not in repr(resolve_credentials(token=A, env={}))
    with pytest.raises(CredentialsError, match="not both"):
        resolve_credentials(token=A, token_file=str(f), env={})
    with pytest.raises(CredentialsError, match="not both"):
        resolve_credentials(env={"SKIFF_METADATA_TOKEN": A, "SKIFF_METADATA_TOKEN_FILE": str(f)})
    with pytest.raises(CredentialsError, match="cannot read"):
        resolve_credentials(token_file=str(tmp_path / "nope"), env={})
    (tmp_path / "two").write_text(f"{A} {B}")
    with pytest.raises(CredentialsError, match="one token"):
        resolve_credentials(token_file=str(tmp_path / "two"), env={})
    with pytest.raises(CredentialsError, match="client certificate"):
        resolve_credentials(key_file="/k.pem", env={})


def test_agent_config_reads_the_same_variables() -> None:
    cfg = AgentConfig.from_env(
        {
            "SKIFF_METADATA_TOKEN": A,
            "SKIFF_METADATA_CA_FILE": "/ca.pem",
            "SKIFF_METADATA_CLIENT_CERT": "/c.pem",
        }
    )
    assert (cfg.metadata_token, cfg.metadata_ca_file, cfg.metadata_client_cert) == (A, "/ca.pem", "/c.pem")
    assert A not in repr(cfg)
    cfg2 = AgentConfig.from_args(["--metadata-token-file", "/run/secrets/token"], env={})
    assert cfg2.metadata_token_file == "/run/secrets/token" and cfg2.metadata_token is None
    with pytest.raises(ValueError, match="one of metadata_token and metadata_token_file"):
        AgentConfig.from_args(["--metadata-token-file", "/t"], env={"SKIFF_METADATA_TOKEN": A})


_SPARK = {"metadata.url": "http://127.0.0.1:1", "subscribe": "t"}


def _auth_header(opts: dict[str, str], monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> str | None:
    for k in ("SKIFF_METADATA_TOKEN", "SKIFF_METADATA_TOKEN_FILE", "SKIFF_METADATA_CA_FILE"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    client = metadata_client(parse_options(opts))
    try:
        return client._http.headers.get("authorization")
    finally:
        client.close()


def test_spark_options_reach_the_client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "token"
    f.write_text(B)
    assert _auth_header({**_SPARK, "metadata.token": A}, monkeypatch, {}) == f"Bearer {A}"
    assert _auth_header({**_SPARK, "metadata.tokenFile": str(f)}, monkeypatch, {}) == f"Bearer {B}"
    # option names are case-insensitive, as Spark's
    assert _auth_header({**_SPARK, "METADATA.TOKEN": A}, monkeypatch, {}) == f"Bearer {A}"
    # no option: the driver's environment, as every Skiff client
    assert _auth_header(_SPARK, monkeypatch, {"SKIFF_METADATA_TOKEN": C}) == f"Bearer {C}"
    assert (
        _auth_header({**_SPARK, "metadata.token": A}, monkeypatch, {"SKIFF_METADATA_TOKEN": C})
        == f"Bearer {A}"
    )
    assert _auth_header(_SPARK, monkeypatch, {}) is None
    with pytest.raises(SkiffOptionError, match="metadata.token"):
        parse_options({**_SPARK, "metadata.token": A, "metadata.tokenFile": str(f)})
    with pytest.raises(SkiffSourceError, match="cannot read"):
        metadata_client(parse_options({**_SPARK, "metadata.tokenFile": str(tmp_path / "missing")}))
    assert A not in repr(parse_options({**_SPARK, "metadata.token": A}))


# ------------------------------------------------------------------ readiness probe


def test_readiness_probe_times_out_and_runs_one_check_at_a_time() -> None:
    release = threading.Event()
    calls: list[int] = []

    def hanging() -> None:
        calls.append(1)
        release.wait(30)

    async def go() -> None:
        probe = ReadinessProbe(hanging, timeout_s=0.05)
        first = await probe.check()
        assert first is not None and "did not answer within 50 ms" in first
        # the hung check is still running: later probes wait on it instead of starting more
        assert (await probe.check()) is not None
        assert len(calls) == 1
        release.set()
        assert await probe.check() is None  # the same check, now finished
        assert len(calls) == 1

    asyncio.run(go())


def test_readiness_probe_reports_a_failing_check() -> None:
    outcomes = [RuntimeError("connection refused"), None]

    def check() -> None:
        outcome = outcomes.pop(0)
        if outcome is not None:
            raise outcome

    async def go() -> None:
        probe = ReadinessProbe(check, timeout_s=5)
        problem = await probe.check()
        assert problem is not None and "RuntimeError: connection refused" in problem
        assert await probe.check() is None  # a failed check is not reused

    asyncio.run(go())


# ------------------------------------------------------------------ wiring


def test_token_over_plain_http_to_a_remote_host_is_warned(caplog: pytest.LogCaptureFixture) -> None:
    from skiff.metadata.wire.credentials import MetadataCredentials
    from skiff.metadata.wire.http_client import HttpMetadataClient

    async def make(url: str, token: str | None) -> None:
        await HttpMetadataClient(url, credentials=MetadataCredentials(token=token)).close()

    with caplog.at_level("WARNING", logger="skiff.metadata.wire.http_client"):
        for url in (
            "http://127.0.0.1:9093",
            "http://localhost:9093",
            "https://metadata:9093",
            "http://[::1]:1",
        ):
            asyncio.run(make(url, A))
        asyncio.run(make("http://metadata.internal:9093", None))  # no token: nothing to leak
        assert caplog.records == []
        asyncio.run(make("http://10.0.0.5:9093", A))
        asyncio.run(make("http://metadata.internal:9093", A))
    assert len(caplog.records) == 2
    assert all("plain HTTP" in r.getMessage() and A not in r.getMessage() for r in caplog.records)


def test_run_metadata_server_warns_and_passes_tls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The wiring of `skiff metadata`: the exposure warning is logged and uvicorn gets the
    TLS settings (uvicorn.run replaced: nothing is bound)."""
    import uvicorn
    from skiff.metadata.server import app as app_mod

    calls: list[dict[str, object]] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: calls.append(kw))
    monkeypatch.setattr(app_mod, "tls_settings", lambda c, k, ca: {"ssl_certfile": c} if c else {})
    db = f"sqlite:///{tmp_path}/m.db"
    with caplog.at_level("WARNING", logger="skiff.metadata.server.app"):
        app_mod.run_metadata_server(db, "0.0.0.0", 1)
        app_mod.run_metadata_server(db, "127.0.0.1", 1)
        app_mod.run_metadata_server(db, "0.0.0.0", 1, tokens=TokenTable.parse(f"admin:{A}", "t"))
        app_mod.run_metadata_server(
            db, "0.0.0.0", 1, tokens=TokenTable.parse(f"admin:{A}", "t"), tls_cert="c.pem", tls_key="k.pem"
        )
    unchecked = [r.getMessage() for r in caplog.records if "not checked against the bucket" in r.getMessage()]
    assert len(unchecked) == 4 and all("no --bucket" in m for m in unchecked)  # one per start, no bucket
    messages = [
        r.getMessage() for r in caplog.records if "not checked against the bucket" not in r.getMessage()
    ]
    assert len(messages) == 2
    assert "without authentication" in messages[0] and "clear text" in messages[1]
    assert [c.get("ssl_certfile") for c in calls] == [None, None, None, "c.pem"]
