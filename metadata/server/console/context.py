"""What every console route shares: the service, the token table, the templates, the bucket.

`ConsoleContext.render` fills a template with what every page shows (the caller's roles,
whether authentication is on, the CSRF token of its forms, the time) and the formatting
helpers of `views.formats`; templates autoescape everything they are given (the SVG
charts, escaped when drawn, are the one value marked safe). `page` turns the service's
refusals (unknown topic, invalid request) into an HTML error page with the service's
status codes instead of the API's JSON. The bucket is opened on first use (the message
browser), from the URL the service was given (`skiff metadata --bucket`, the playground's).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, FileSystemLoader, select_autoescape
from skiff.fileformat.objectstore import ObjectStore
from skiff.fileformat.objectstore.pricing import Prices
from skiff.metadata.errors import UNKNOWN_TOPIC_OR_PARTITION, MetadataError
from skiff.metadata.server.auth import MetadataAuth
from skiff.metadata.server.bucket import LazyBucket
from skiff.metadata.server.console.session import caller_roles, csrf_token
from skiff.metadata.server.console.views import formats
from skiff.metadata.server.iceberg_rest import CatalogRows
from skiff.metadata.server.lag_sampler import LagSampler
from skiff.metadata.server.table_freshness import TableFreshness
from skiff.metadata.service import MetadataService
from skiff.metadata.wire.roles import ADMIN

HERE = Path(__file__).parent


class ConsoleContext:
    def __init__(
        self,
        service: MetadataService,
        auth: MetadataAuth,
        lag_sampler: LagSampler,
        prices: Prices | None = None,
    ) -> None:
        self.service = service
        self.auth = auth
        self.lag_sampler = lag_sampler
        self.prices = prices or Prices.from_env()
        self.env = Environment(
            loader=FileSystemLoader(HERE / "templates"),
            autoescape=select_autoescape(["html"]),
            trim_blocks=True,
            lstrip_blocks=True,
        )
        for name in ("fmt_bytes", "fmt_count", "fmt_time", "fmt_age", "fmt_usd"):
            self.env.globals[name] = getattr(formats, name)
        self.bucket = LazyBucket(service)
        self.tables = TableFreshness(CatalogRows(self.bucket))  # the topics' Iceberg tables

    def sample_lag(self) -> None:
        """A lag sample now if the current interval has none (metadata.server.lag_sampler)."""
        self.lag_sampler.sample_if_due()

    def now_ms(self) -> int:
        return self.service.clock()

    def store(self) -> ObjectStore:
        """The bucket the agents write to; MetadataError if the service was not told it."""
        return self.bucket.store()

    def close(self) -> None:
        self.bucket.close()

    def render(
        self,
        request: Request,
        template: str,
        *,
        title: str,
        nav: str = "",
        status_code: int = 200,
        **values: Any,
    ) -> HTMLResponse:
        roles = caller_roles(request, self.auth)
        html = self.env.get_template(template).render(
            title=title,
            nav=nav,
            auth_enabled=self.auth.enabled,
            roles=sorted(roles),
            is_admin=ADMIN in roles,
            csrf_token=csrf_token(request),
            now=formats.fmt_time(self.now_ms()),
            now_ms=self.now_ms(),
            **values,
        )
        return HTMLResponse(html, status_code=status_code, headers=SECURITY_HEADERS)

    def error(self, request: Request, message: str, status_code: int, back: str = "/console") -> HTMLResponse:
        return self.render(
            request, "error.html", title="Error", status_code=status_code, message=message, back=back
        )

    def page(
        self, request: Request, build: Callable[[], HTMLResponse], back: str = "/console"
    ) -> HTMLResponse:
        """`build()`, or the error page for what the service refused."""
        try:
            return build()
        except MetadataError as e:
            status = 404 if e.error_code == UNKNOWN_TOPIC_OR_PARTITION else 400
            return self.error(request, e.message, status, back)


# No page of the console runs a script or is framed by another site.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self';"
    " frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
