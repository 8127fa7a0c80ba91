"""Kafka listeners: parsing Kafka-style `listeners` settings, TLS contexts and TLS principals.

Settings, as Kafka spells them (all optional):

- `listeners`: `NAME://host:port[,NAME://host:port...]`, e.g.
  `PLAINTEXT://0.0.0.0:9092,SASL_SSL://0.0.0.0:9094`. An empty host binds every interface;
  port 0 takes any free port (tests). Unset: the single listener `PLAINTEXT://host:port`
  from `--host/--port` (and `--advertised-host/--advertised-port`), as before listeners.
- `listener_security_protocol_map`: `NAME:PROTOCOL[,...]`, mapping listener names to one
  of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL. A name that is itself a protocol maps to
  it by default (Kafka's default map), so `SASL_SSL://...` needs no entry; other names
  (`INTERNAL`, `EXTERNAL`) must be mapped.
- `advertised_listeners`: the same syntax, the address clients are told per listener
  name. A listener without one advertises `advertised_host` (else its bind host, or this
  machine's hostname for a wildcard) and the port it is bound to.

Each listener is its own asyncio server (`agent.runtime`); Metadata, FindCoordinator and
DescribeCluster answer with every broker's address on the listener the client connected
through (`agent.agent_registry.Broker.address`).

TLS (`SSL`, `SASL_SSL`): `ssl_certfile`/`ssl_keyfile` (PEM, no password), optional client
certificates (`ssl_client_auth` none/requested/required against `ssl_cafile`). A verified
client certificate's subject becomes the principal `User:CN=...,OU=...,O=...` (RFC 2253
order, most specific first, as Kafka's default principal builder writes X500Principal
names), unless SASL later names the user.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

PLAINTEXT = "PLAINTEXT"
SSL = "SSL"
SASL_PLAINTEXT = "SASL_PLAINTEXT"
SASL_SSL = "SASL_SSL"
SECURITY_PROTOCOLS = (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)
CLIENT_AUTH_MODES = ("none", "requested", "required")
ANONYMOUS = "User:ANONYMOUS"
_WILDCARDS = ("", "0.0.0.0", "::", "[::]")


@dataclass(frozen=True)
class Endpoint:
    name: str
    host: str
    port: int


@dataclass(frozen=True)
class Listener:
    """One configured listener: where it binds, what it speaks, what it advertises."""

    name: str
    security_protocol: str
    host: str
    port: int
    advertised_host: str | None = None  # None: derived (see the module docstring)
    advertised_port: int | None = None  # None: the bound port

    @property
    def tls(self) -> bool:
        return self.security_protocol in (SSL, SASL_SSL)

    @property
    def sasl(self) -> bool:
        return self.security_protocol in (SASL_PLAINTEXT, SASL_SSL)


def parse_endpoints(text: str, setting: str = "listeners") -> list[Endpoint]:
    """`NAME://host:port,...` -> endpoints; ValueError naming `setting` on bad input."""
    out: list[Endpoint] = []
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        name, sep, rest = item.partition("://")
        if not sep or not name:
            raise ValueError(f"{setting}: {item!r} is not NAME://host:port")
        if rest.startswith("["):  # [IPv6]:port
            host, bracket, port_text = rest[1:].partition("]:")
            if not bracket:
                raise ValueError(f"{setting}: {item!r} is not NAME://[host]:port")
        else:
            host, colon, port_text = rest.rpartition(":")
            if not colon:
                raise ValueError(f"{setting}: {item!r} has no port")
        try:
            port = int(port_text)
        except ValueError:
            raise ValueError(f"{setting}: {item!r} has no valid port") from None
        if not 0 <= port <= 65535:
            raise ValueError(f"{setting}: port {port} of {name} is not a TCP port")
        name = name.upper()
        if any(e.name == name for e in out):
            raise ValueError(f"{setting}: listener name {name} appears twice")
        out.append(Endpoint(name, host, port))
    return out


def parse_protocol_map(text: str | None) -> dict[str, str]:
    """`NAME:PROTOCOL,...` over Kafka's default map (each protocol maps to itself)."""
    mapping = {p: p for p in SECURITY_PROTOCOLS}
    for raw in (text or "").split(","):
        item = raw.strip()
        if not item:
            continue
        name, colon, proto = item.partition(":")
        proto = proto.strip().upper()
        if not colon or not name.strip():
            raise ValueError(f"listener_security_protocol_map: {item!r} is not NAME:PROTOCOL")
        if proto not in SECURITY_PROTOCOLS:
            raise ValueError(
                f"listener_security_protocol_map: unknown security protocol {proto!r} "
                f"(one of {', '.join(SECURITY_PROTOCOLS)})"
            )
        mapping[name.strip().upper()] = proto
    return mapping


def build_listeners(
    listeners: str | None,
    advertised_listeners: str | None,
    protocol_map: str | None,
    *,
    host: str,
    port: int,
    advertised_host: str | None,
    advertised_port: int | None,
) -> list[Listener]:
    """The configured listeners (ValueError with the setting's name on a bad value)."""
    mapping = parse_protocol_map(protocol_map)
    advertised = {e.name: e for e in parse_endpoints(advertised_listeners or "", "advertised_listeners")}
    if not listeners:
        if advertised_listeners:
            raise ValueError("advertised_listeners needs listeners")
        return [Listener(PLAINTEXT, PLAINTEXT, host, port, advertised_host, advertised_port or None)]
    out: list[Listener] = []
    ports: set[int] = set()
    for e in parse_endpoints(listeners):
        proto = mapping.get(e.name)
        if proto is None:
            raise ValueError(
                f"listeners: no security protocol for listener {e.name} (add {e.name}:PROTOCOL to "
                "listener_security_protocol_map)"
            )
        if e.port and e.port in ports:
            raise ValueError(f"listeners: port {e.port} is used twice")
        ports.add(e.port)
        adv = advertised.get(e.name)
        out.append(
            Listener(
                e.name,
                proto,
                e.host,
                e.port,
                (adv.host or None) if adv else advertised_host,
                (adv.port or None) if adv else None,
            )
        )
    unknown = set(advertised) - {x.name for x in out}
    if unknown:
        raise ValueError(f"advertised_listeners: {', '.join(sorted(unknown))} not in listeners")
    return out


def bind_host(listener: Listener) -> str | None:
    """The host to bind (None: every interface, for asyncio)."""
    return None if listener.host in ("", "[::]") else listener.host


def advertised_address(listener: Listener, bound_port: int, default_host: str) -> tuple[str, int]:
    """What clients are told for this listener: its advertised host (else its bind host,
    else `default_host` for a wildcard) and port (else the bound port)."""
    if listener.advertised_host:
        host = listener.advertised_host
    elif listener.host not in _WILDCARDS:
        host = listener.host
    else:
        host = default_host
    return host, listener.advertised_port or bound_port


# --- TLS ----------------------------------------------------------------------------------


def server_ssl_context(
    certfile: str | None, keyfile: str | None, cafile: str | None, client_auth: str
) -> ssl.SSLContext:
    """The TLS context of SSL/SASL_SSL listeners (TLS 1.2+). `client_auth`: none (no client
    certificate asked), requested (verified if sent), required (handshake fails without one)."""
    if not certfile:
        raise ValueError("a TLS listener (SSL or SASL_SSL) needs ssl_certfile (and ssl_keyfile)")
    if client_auth not in CLIENT_AUTH_MODES:
        raise ValueError(
            f"ssl_client_auth must be one of {', '.join(CLIENT_AUTH_MODES)}, got {client_auth!r}"
        )
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(certfile, keyfile or None)
    if client_auth != "none":
        if not cafile:
            raise ValueError(
                f"ssl_client_auth={client_auth} needs ssl_cafile (the CA of client certificates)"
            )
        ctx.load_verify_locations(cafile)
        ctx.verify_mode = ssl.CERT_REQUIRED if client_auth == "required" else ssl.CERT_OPTIONAL
    return ctx


def tls_principal(ssl_object: ssl.SSLObject | ssl.SSLSocket | None) -> str | None:
    """`User:<subject DN>` of the verified client certificate, or None without one.

    The DN is RFC 2253/4514 text (`CN=alice,OU=eng,O=Example`), the form Kafka's default
    principal builder uses (X500Principal.getName()). Only certificates the handshake
    verified count: with `ssl_client_auth=none` none is asked for."""
    if ssl_object is None:
        return None
    der = ssl_object.getpeercert(binary_form=True)
    if not der:
        return None
    from cryptography import x509

    return "User:" + x509.load_der_x509_certificate(der).subject.rfc4514_string()
