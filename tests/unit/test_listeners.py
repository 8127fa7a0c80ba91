"""Listener settings as Kafka spells them (agent.listeners) and their checks in AgentConfig."""

from __future__ import annotations

import pytest
from skiff.agent.config import AgentConfig
from skiff.agent.network.listeners import (
    Listener,
    advertised_address,
    build_listeners,
    parse_endpoints,
    parse_protocol_map,
)


def _build(listeners: str | None, advertised: str | None = None, pmap: str | None = None) -> list[Listener]:
    return build_listeners(
        listeners, advertised, pmap, host="0.0.0.0", port=9092, advertised_host=None, advertised_port=None
    )


def test_endpoints_parse_names_hosts_ports_and_ipv6() -> None:
    eps = parse_endpoints("PLAINTEXT://0.0.0.0:9092, sasl_ssl://:9094,SSL://[::1]:9093")
    assert [(e.name, e.host, e.port) for e in eps] == [
        ("PLAINTEXT", "0.0.0.0", 9092),
        ("SASL_SSL", "", 9094),
        ("SSL", "::1", 9093),
    ]


@pytest.mark.parametrize(
    "text,needle",
    [
        ("PLAINTEXT:9092", "NAME://host:port"),
        ("PLAINTEXT://host", "no port"),
        ("PLAINTEXT://host:x", "no valid port"),
        ("PLAINTEXT://host:70000", "not a TCP port"),
        ("A://h:1,a://h:2", "appears twice"),
    ],
)
def test_bad_endpoints_name_the_problem(text: str, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        parse_endpoints(text)


def test_protocol_map_defaults_and_custom_names() -> None:
    m = parse_protocol_map("internal:PLAINTEXT, EXTERNAL:sasl_ssl")
    assert m["SASL_SSL"] == "SASL_SSL" and m["SSL"] == "SSL"
    assert m["INTERNAL"] == "PLAINTEXT" and m["EXTERNAL"] == "SASL_SSL"
    with pytest.raises(ValueError, match="unknown security protocol"):
        parse_protocol_map("X:TLS")


def test_unset_listeners_are_the_single_plaintext_listener_of_host_and_port() -> None:
    (li,) = build_listeners(
        None, None, None, host="10.0.0.1", port=19092, advertised_host="b1", advertised_port=29092
    )
    assert li == Listener("PLAINTEXT", "PLAINTEXT", "10.0.0.1", 19092, "b1", 29092)


def test_listeners_with_map_and_advertised_addresses() -> None:
    ls = _build(
        "INTERNAL://0.0.0.0:9092,EXTERNAL://0.0.0.0:9094",
        "EXTERNAL://kafka.example.com:19094",
        "INTERNAL:PLAINTEXT,EXTERNAL:SASL_SSL",
    )
    assert [(li.name, li.security_protocol, li.tls, li.sasl) for li in ls] == [
        ("INTERNAL", "PLAINTEXT", False, False),
        ("EXTERNAL", "SASL_SSL", True, True),
    ]
    assert advertised_address(ls[0], 9092, "pod-1") == ("pod-1", 9092)  # wildcard: the default host
    assert advertised_address(ls[1], 9094, "pod-1") == ("kafka.example.com", 19094)
    bound = _build("SSL://127.0.0.1:0")[0]
    assert advertised_address(bound, 41234, "pod-1") == ("127.0.0.1", 41234)  # port 0: the bound port


@pytest.mark.parametrize(
    "listeners,advertised,pmap,needle",
    [
        ("INTERNAL://:9092", None, None, "no security protocol for listener INTERNAL"),
        ("PLAINTEXT://:9092,SSL://:9092", None, None, "port 9092 is used twice"),
        ("PLAINTEXT://:9092", "SSL://h:1", None, "SSL not in listeners"),
        (None, "PLAINTEXT://h:1", None, "advertised_listeners needs listeners"),
    ],
)
def test_inconsistent_listener_settings_are_refused(
    listeners: str | None, advertised: str | None, pmap: str | None, needle: str
) -> None:
    with pytest.raises(ValueError, match=needle):
        _build(listeners, advertised, pmap)


def test_config_refuses_tls_listener_without_certificate_and_bad_sasl_settings() -> None:
    with pytest.raises(ValueError, match="needs ssl_certfile"):
        AgentConfig(agent_id="a", listeners="SSL://127.0.0.1:0")
    with pytest.raises(ValueError, match="unsupported mechanism 'GSSAPI'"):
        AgentConfig(agent_id="a", sasl_enabled_mechanisms="PLAIN,GSSAPI")
    with pytest.raises(ValueError, match="no security protocol"):
        AgentConfig.from_env({"SKIFF_LISTENERS": "OUTSIDE://:9094"}, agent_id="a")
    ok = AgentConfig.from_env(
        {
            "SKIFF_LISTENERS": "OUTSIDE://:9094",
            "SKIFF_LISTENER_SECURITY_PROTOCOL_MAP": "OUTSIDE:SASL_PLAINTEXT",
        },
        agent_id="a",
    )
    assert [li.security_protocol for li in ok.resolved_listeners()] == ["SASL_PLAINTEXT"]


def test_every_agent_is_addressed_on_the_clients_listener() -> None:
    from skiff.agent.agent_registry import LiveAgents
    from skiff.metadata.types import AgentInfo

    me = AgentInfo("a", "10.0.0.1", 9092)
    view = LiveAgents(me, wall_ms=lambda: 1_000)
    view.set_self_address(
        "10.0.0.1", 9092, (("INTERNAL", "10.0.0.1", 9092), ("EXTERNAL", "a.example.com", 9094))
    )
    view.update(
        [
            AgentInfo(
                "b",
                "10.0.0.2",
                9092,
                listeners=(("INTERNAL", "10.0.0.2", 9092), ("EXTERNAL", "b.example.com", 9094)),
            ),
            AgentInfo("old", "10.0.0.3", 9092),  # registered before listeners: one address
        ]
    )
    by_agent = {b.agent_id: b for b in view.brokers()}
    assert by_agent["a"].address("EXTERNAL") == ("a.example.com", 9094)
    assert by_agent["b"].address("EXTERNAL") == ("b.example.com", 9094)
    assert by_agent["b"].address("INTERNAL") == ("10.0.0.2", 9092)
    assert by_agent["old"].address("EXTERNAL") == ("10.0.0.3", 9092)
    version = view.version
    view.update(
        [
            AgentInfo(
                "b",
                "10.0.0.2",
                9092,
                listeners=(("INTERNAL", "10.0.0.2", 9092), ("EXTERNAL", "b2.example.com", 9094)),
            ),
            AgentInfo("old", "10.0.0.3", 9092),
        ]
    )
    assert view.version > version  # a changed advertised listener is a membership change
    assert {b.agent_id: b for b in view.brokers()}["b"].address("EXTERNAL") == ("b2.example.com", 9094)
