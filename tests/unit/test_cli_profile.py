"""The admin commands' cluster settings (skiff.cli.profile): flag > env > profile > default,
the profile found under XDG_CONFIG_HOME (or SKIFF_CONFIG), and one-line refusals of a
broken profile."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from skiff.cli.errors import CommandError, UsageError
from skiff.cli.profile import DEFAULT_METADATA_URL, profile_path, resolve


def _args(**flags: object) -> argparse.Namespace:
    base: dict[str, object] = {
        "metadata_url": None,
        "bootstrap_server": None,
        "metadata_token_file": None,
        "metadata_ca_file": None,
        "timeout_ms": None,
        "command_config": None,
    }
    return argparse.Namespace(**{**base, **flags})


def _profile(tmp_path: Path, text: str) -> dict[str, str]:
    (tmp_path / "skiff").mkdir(exist_ok=True)
    (tmp_path / "skiff" / "config.toml").write_text(text)
    return {"XDG_CONFIG_HOME": str(tmp_path)}


def test_default_without_anything(tmp_path: Path) -> None:
    c = resolve(_args(), {"XDG_CONFIG_HOME": str(tmp_path)})
    assert (c.metadata_url, c.bootstrap_server, c.source, c.timeout_ms) == (
        DEFAULT_METADATA_URL,
        None,
        "default",
        10_000,
    )


def test_profile_path_honours_xdg_and_skiff_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert profile_path({}) == tmp_path / ".config" / "skiff" / "config.toml"
    assert profile_path({"XDG_CONFIG_HOME": "/x"}) == Path("/x/skiff/config.toml")
    assert profile_path({"XDG_CONFIG_HOME": "/x", "SKIFF_CONFIG": "/y.toml"}) == Path("/y.toml")


def test_flag_beats_env_beats_profile(tmp_path: Path) -> None:
    env = _profile(
        tmp_path,
        'bootstrap_server = "p:9092"\nmetadata_token_file = "/p/token"\ntimeout_ms = 5000\n'
        '[kafka]\n"security.protocol" = "SASL_SSL"\n',
    )
    c = resolve(_args(), env)
    assert (c.metadata_url, c.bootstrap_server, c.source) == (None, "p:9092", "profile")
    assert (c.token_file, c.timeout_ms, c.kafka_config) == (
        "/p/token",
        5000,
        {"security.protocol": "SASL_SSL"},
    )
    env_level = {**env, "SKIFF_METADATA_URL": "http://e:9093", "SKIFF_METADATA_TIMEOUT_MS": "7000"}
    c = resolve(_args(), env_level)
    assert (c.metadata_url, c.bootstrap_server, c.source, c.timeout_ms) == (
        "http://e:9093",
        None,
        "env",
        7000,
    )
    c = resolve(_args(bootstrap_server="f:9092", timeout_ms=100), env_level)
    assert (c.metadata_url, c.bootstrap_server, c.source, c.timeout_ms) == (None, "f:9092", "flag", 100)
    # an environment token beats the profile's token file; the flag's file beats both
    assert resolve(_args(), {**env, "SKIFF_METADATA_TOKEN": "t"}).token_file is None
    assert resolve(_args(metadata_token_file="/f"), {**env, "SKIFF_METADATA_TOKEN": "t"}).token_file == "/f"


def test_command_config_beats_the_profile_table(tmp_path: Path) -> None:
    env = _profile(tmp_path, '[kafka]\n"security.protocol" = "SSL"\n"client.id" = "ops"\n')
    props = tmp_path / "client.properties"
    props.write_text("# Kafka's format\nsecurity.protocol=SASL_PLAINTEXT\nsasl.mechanism = PLAIN\n")
    c = resolve(_args(command_config=str(props)), env)
    assert c.kafka_config == {
        "security.protocol": "SASL_PLAINTEXT",
        "client.id": "ops",
        "sasl.mechanism": "PLAIN",
    }


def test_both_at_one_level_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="command line names both"):
        resolve(_args(metadata_url="http://a", bootstrap_server="b:1"), {"XDG_CONFIG_HOME": str(tmp_path)})
    env = _profile(tmp_path, 'metadata_url = "http://a"\nbootstrap_server = "b:1"\n')
    with pytest.raises(UsageError, match="names both"):
        resolve(_args(), env)
    assert resolve(_args(metadata_url="http://f"), env).metadata_url == "http://f"  # a higher level decides


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('metadata_ulr = "http://typo"\n', "unknown key"),
        ("metadata_url = \n", "not valid TOML"),
        ('kafka = "x"\n', "must be a table"),
    ],
)
def test_a_broken_profile_is_one_line(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(CommandError, match=message):
        resolve(_args(), _profile(tmp_path, text))


def test_a_named_profile_must_exist(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="does not exist"):
        resolve(_args(), {"SKIFF_CONFIG": str(tmp_path / "nope.toml")})
