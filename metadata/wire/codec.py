"""Each metadata operation declared once; the wire layer derived from the declaration.

An operation is a method of a Protocol in `metadata.wire.operations`, decorated with
`@operation(path, *roles)`: its name, parameters (with their bounds, `metadata.wire.bounds`),
return type, HTTP path, HTTP method and the token roles that may call it. Everything that
carries a call across the process boundary is derived from that one place:

- the FastAPI route (`metadata.server.routes`): one per operation, under the declared roles,
  validating the body and calling the `MetadataService` method of the same name;
- the HTTP clients (`metadata.wire.http_client`, async and sync) and the in-process client
  (`metadata.server.local_client`), which forward any declared method generically;
- the test fakes, which wrap any client the same way.

Wire format (JSON, UTF-8): a request is an object keyed by parameter name (defaults may be
left out; unknown keys are refused); an answer is the return value. Values follow pydantic
over the domain dataclasses: a dataclass is an object keyed by field name, tuples, sets
and sequences are arrays, `uuid.UUID` is text, `bytes` are base64 (URL-safe alphabet),
enums are their values, a dict's keys are text.

`acting_as` names, for a route that acts for an agent, the agent ids the call speaks for
(a token bound to other agents is refused: `metadata.server.auth.check_acting_as`);
`long_poll_ms` names the parameter whose value the call may legitimately wait (the HTTP
timeout is extended by it).
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, TypeAdapter, create_model

WIRE_CONFIG = ConfigDict(
    extra="forbid",
    ser_json_bytes="base64",
    val_json_bytes="base64",
    arbitrary_types_allowed=False,
)

Args = Mapping[str, Any]
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class OperationSpec:
    """What `@operation` records on a method (see the module docstring)."""

    path: str
    roles: tuple[str, ...]
    http_method: str = "POST"
    acting_as: Callable[[Args], Iterable[str]] | None = None
    long_poll_ms: str | None = None
    summary: str = ""


def operation(
    path: str,
    *roles: str,
    http_method: str = "POST",
    acting_as: Callable[[Args], Iterable[str]] | None = None,
    long_poll_ms: str | None = None,
) -> Callable[[F], F]:
    """Declare a Protocol method a metadata operation (see the module docstring); the
    method keeps its type."""

    def mark(fn: F) -> F:
        summary = (inspect.getdoc(fn) or "").split("\n\n")[0]
        fn.__skiff_operation__ = OperationSpec(  # type: ignore[attr-defined]
            path, roles, http_method.upper(), acting_as, long_poll_ms, summary
        )
        return fn

    return mark


class Operation:
    """One declared operation and its derived wire codec."""

    def __init__(self, name: str, fn: Callable[..., Any], spec: OperationSpec) -> None:
        self.name = name
        self.spec = spec
        hints = typing.get_type_hints(fn, include_extras=True)
        sig = inspect.signature(fn)
        self.params = [p for p in sig.parameters.values() if p.name != "self"]
        self.signature = sig.replace(parameters=self.params)
        fields: dict[str, Any] = {
            p.name: (hints[p.name], ... if p.default is inspect.Parameter.empty else p.default)
            for p in self.params
        }
        camel = "".join(part.title() for part in name.split("_"))
        self.request: type[BaseModel] = create_model(f"{camel}Request", __config__=WIRE_CONFIG, **fields)
        returns = hints.get("return", type(None))
        self.returns: Any = returns
        # JSON object keys are text: a dict keyed by tuples travels as [key, value] pairs.
        self._pairs = (
            typing.get_origin(returns) is dict and typing.get_origin(typing.get_args(returns)[0]) is tuple
        )
        wire: Any = list[tuple[typing.get_args(returns)]] if self._pairs else returns  # type: ignore[misc]
        # A dataclass carries its own config in pydantic; `| None` makes the adapter a union,
        # which takes the wire config (bytes as base64) down into the dataclass.
        self.response: TypeAdapter[Any] = TypeAdapter(wire | None, config=WIRE_CONFIG)
        self.doc = inspect.getdoc(fn) or ""

    def __repr__(self) -> str:
        return f"Operation({self.name}: {self.spec.http_method} {self.spec.path})"

    # ---------------------------------------------------------------- client side

    def bind(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The call's arguments by name, defaults applied (a TypeError like Python's if they
        do not fit the declaration)."""
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return dict(bound.arguments)

    def encode_request(self, arguments: Mapping[str, Any]) -> bytes:
        # model_construct: the caller's values are trusted here (the server validates).
        return self.request.model_construct(**arguments).model_dump_json().encode()

    def decode_response(self, data: bytes) -> Any:
        """The answer's value (pydantic's ValidationError if it is malformed)."""
        value = self.response.validate_json(data)
        return dict(value) if self._pairs and value is not None else value

    # ---------------------------------------------------------------- server side

    def decode_request(self, body: bytes) -> dict[str, Any]:
        """The arguments of a request body, validated (pydantic's ValidationError if not)."""
        model = self.request.model_validate_json(body or b"{}")
        return {p.name: getattr(model, p.name) for p in self.params}

    def encode_response(self, value: Any) -> bytes:
        return self.response.dump_json(list(value.items()) if self._pairs else value)

    def acting_as(self, arguments: Args) -> list[str]:
        """The agent ids this call acts for (empty: it acts for nobody in particular)."""
        return [] if self.spec.acting_as is None else list(self.spec.acting_as(arguments))


def operations_of(protocol: type) -> dict[str, Operation]:
    """Every operation declared on `protocol` (and the Protocols it extends), by name."""
    found: dict[str, Operation] = {}
    for klass in reversed(protocol.__mro__):
        for name, fn in vars(klass).items():
            spec = getattr(fn, "__skiff_operation__", None)
            if isinstance(spec, OperationSpec):
                found[name] = Operation(name, fn, spec)
    return found
