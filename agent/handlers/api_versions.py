"""ApiVersions (api key 18), v0-v3: which APIs and versions this agent serves.

The answer lists exactly the registry's (api_key, min_version, max_version) entries, so
what is advertised and what is dispatched can never disagree.

Version negotiation (KIP-511): a client opens with the newest ApiVersions it knows. If
this agent does not support that version, it answers in v0 format (response header v0,
which every version of the client can read) with UNSUPPORTED_VERSION and an api_keys
list holding only ApiVersions' own supported range; the client retries with the highest
version in that range. The server calls `unsupported_version_response` for that case
before the request body is even parsed (a newer body may not parse).

v3 requests carry the client's software name and version; like Kafka, they must match
`[a-zA-Z0-9](?:[a-zA-Z0-9\\-.]*[a-zA-Z0-9])?`, else INVALID_REQUEST.
"""

from __future__ import annotations

import re
from typing import Any

from kio.schema.api_versions.v0.response import ApiVersion as ApiVersionV0
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.api_versions.v3.request import ApiVersionsRequest as ApiVersionsRequestV3
from kio.schema.api_versions.v3.response import ApiVersion, ApiVersionsResponse
from kio.schema.errors import ErrorCode
from kio.static.primitive import i16
from skiff.agent.context import AgentContext
from skiff.agent.handlers import NO_THROTTLE, HandlerRegistry, HandlerSpec, Request
from skiff.agent.handlers._access import PRE_AUTH
from skiff.agent.protocol import API_VERSIONS_KEY

MIN_VERSION = 0
MAX_VERSION = 3

_SOFTWARE_RE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


def api_version_entries(registry: HandlerRegistry) -> tuple[ApiVersion, ...]:
    return tuple(
        ApiVersion(api_key=i16(s.api_key), min_version=i16(s.min_version), max_version=i16(s.max_version))
        for s in registry.specs()
    )


def unsupported_version_response(registry: HandlerRegistry) -> ApiVersionsResponseV0:
    """KIP-511: the v0 answer to an ApiVersions version this agent does not serve."""
    spec = registry.get(API_VERSIONS_KEY)
    lo, hi = (spec.min_version, spec.max_version) if spec is not None else (MIN_VERSION, MAX_VERSION)
    return ApiVersionsResponseV0(
        error_code=ErrorCode.unsupported_version,
        api_keys=(ApiVersionV0(api_key=i16(API_VERSIONS_KEY), min_version=i16(lo), max_version=i16(hi)),),
    )


async def handle(ctx: AgentContext, request: Request) -> Any:
    body = request.body
    if isinstance(body, ApiVersionsRequestV3):
        name, version = body.client_software_name, body.client_software_version
        if not (_SOFTWARE_RE.fullmatch(name) and _SOFTWARE_RE.fullmatch(version)):
            return ApiVersionsResponse(
                error_code=ErrorCode.invalid_request,
                api_keys=api_version_entries(request.registry),
                throttle_time=NO_THROTTLE,
            )
        request.connection.client_software_name = name
        request.connection.client_software_version = version
    return ApiVersionsResponse(
        error_code=ErrorCode.none,
        api_keys=api_version_entries(request.registry),
        throttle_time=NO_THROTTLE,
    )


ACCESS = PRE_AUTH

SPEC = HandlerSpec(API_VERSIONS_KEY, MIN_VERSION, MAX_VERSION, handle, access=ACCESS)
