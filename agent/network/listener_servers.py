"""Opening every configured listener of one agent (`agent.listeners`), each its own
`AgentServer`, and advertising all of them.

Without `listeners` configured this is exactly the single PLAINTEXT server of before
(`start_agent_server` on host:port). With it, one server per listener: TLS listeners
share one `ssl.SSLContext`, SASL listeners one credential cache; once all are bound, the
live-agent view (and so the registry row in metadata) gets every listener's advertised
address, and the first listener's is the agent's primary address.
"""

from __future__ import annotations

from skiff.agent.context import AgentContext
from skiff.agent.handlers import HandlerRegistry, default_registry
from skiff.agent.network.listeners import advertised_address, bind_host, server_ssl_context
from skiff.agent.network.sasl import CredentialCache, parse_mechanisms
from skiff.agent.network.server import AgentServer, start_agent_server
from skiff.agent.network.tls import ListenerSecurity


async def start_listener_servers(
    ctx: AgentContext, registry: HandlerRegistry | None = None
) -> list[AgentServer]:
    cfg = ctx.config
    if not cfg.listeners:
        return [await start_agent_server(ctx, cfg.host, cfg.port, registry=registry)]
    listeners = cfg.resolved_listeners()
    registry = registry or default_registry()
    ssl_context = None
    if any(li.tls for li in listeners):
        ssl_context = server_ssl_context(
            cfg.ssl_certfile, cfg.ssl_keyfile, cfg.ssl_cafile, cfg.ssl_client_auth
        )
    credentials = CredentialCache(ctx.metadata, cfg.scram_credential_cache_ms, ctx.clock.monotonic)
    mechanisms = parse_mechanisms(cfg.sasl_enabled_mechanisms)
    servers: list[AgentServer] = []
    try:
        for li in listeners:
            security = ListenerSecurity(
                li,
                ssl_context if li.tls else None,
                cfg.ssl_handshake_timeout_ms,
                mechanisms if li.sasl else (),
                credentials if li.sasl else None,
                cfg.connections_max_reauth_ms,
                ctx.clock.monotonic,
            )
            server = AgentServer(ctx, registry, bind_host(li), li.port, security)
            await server.start()
            servers.append(server)
    except BaseException:
        for s in servers:
            await s.close()
        raise
    default_host = cfg.resolved_advertised_host()
    endpoints = tuple(
        (li.name, *advertised_address(li, s.port, default_host))
        for li, s in zip(listeners, servers, strict=True)
    )
    ctx.agents.set_self_address(endpoints[0][1], endpoints[0][2], endpoints)
    return servers
