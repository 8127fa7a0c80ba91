"""The metadata operations as FastAPI routes, derived from their declarations.

For each operation of `metadata.wire.operations.OPERATIONS`: one route at its path and HTTP
method, on a router declaring its token roles (`metadata.server.auth.allow`), that validates the
JSON body against the operation's parameters (`metadata.wire.codec`; a malformed body is a
422 with INVALID_REQUEST, raised as `RequestValidationError` for the app's handler),
refuses a token bound to other agents than the call acts for (`check_acting_as`), calls
the `MetadataService` method of the same name (blocking methods in the thread pool, async
ones awaited) and answers its value as JSON. Errors are the app's handlers'
(metadata.server.app). The OpenAPI page lists each route with its Python signature.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from skiff.metadata.server.auth import allow, check_acting_as
from skiff.metadata.service import MetadataService
from skiff.metadata.wire.codec import Operation

JSON = "application/json"


def operation_routers(svc: MetadataService, operations: Iterable[Operation]) -> list[APIRouter]:
    """One router per distinct set of roles, holding the routes of those operations."""
    routers: dict[tuple[str, ...], APIRouter] = {}
    for op in operations:
        roles = tuple(sorted(op.spec.roles))
        router = routers.get(roles)
        if router is None:
            router = routers[roles] = APIRouter(dependencies=[allow(*roles)])
        _add_route(router, svc, op)
    return list(routers.values())


def _add_route(router: APIRouter, svc: MetadataService, op: Operation) -> None:
    impl = getattr(svc, op.name)
    endpoint = _endpoint(op, impl)
    router.add_api_route(
        op.spec.path,
        endpoint,
        methods=[op.spec.http_method],
        name=op.name,
        summary=op.spec.summary or op.name.replace("_", " "),
        description=f"`{op.name}{op.signature}`\n\n{op.doc}".strip(),
        tags=[op.spec.path.split("/")[2]],
        response_class=Response,
    )


def _endpoint(op: Operation, impl: Callable[..., Any]) -> Callable[[Request], Awaitable[Response]]:
    is_async = inspect.iscoroutinefunction(impl)

    async def endpoint(request: Request) -> Response:
        try:
            arguments = op.decode_request(await request.body()) if op.params else {}
        except ValidationError as e:
            raise RequestValidationError(e.errors(include_url=False)) from None
        for agent_id in op.acting_as(arguments):
            check_acting_as(request, agent_id)
        if is_async:
            value = await impl(**arguments)
        else:
            value = await run_in_threadpool(impl, **arguments)
        return Response(op.encode_response(value), media_type=JSON)

    endpoint.__name__ = op.name
    return endpoint
