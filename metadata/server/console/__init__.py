"""The web console at /console: topics, files, consumer groups and compaction in a browser.

Served by the metadata service on its own port with its own tokens (`reader` views,
`admin` acts; metadata.server.auth). Server-rendered HTML (Jinja2 templates under
`templates/`, one stylesheet under `static/`), charts drawn as inline SVG on the server:
no build step, no script, no CDN; it works offline. A browser without a token gets the
login page (console.session); with authentication off (the playground) there is none.

Modules: `session` (the token cookie, the login gate, CSRF), `login` (the public routes),
`routes` (the pages), `actions` (the admin actions, each confirmed), `browser` (records
read from the bucket through `fileformat.read_sync`, as Spark and `skiff inspect` read
them), `queries` (the console's read-only SQL), `context` (templates and what the routes
share), `views.data` / `views.formats` / `views.charts` (pure shaping and drawing).
Operators' guide: docs/console.md.

`mount_console(app, service, auth)` adds it to the service's app: after the service's
own authentication middleware, so that the console's gate runs first (outermost).
"""

from __future__ import annotations

from fastapi import FastAPI
from skiff.metadata.server.auth import MetadataAuth
from skiff.metadata.server.lag_sampler import LagSampler
from skiff.metadata.service import MetadataService


def mount_console(
    app: FastAPI, service: MetadataService, auth: MetadataAuth, lag_sampler: LagSampler
) -> None:
    """Serve the console at /console on `app` (call after `auth.add_middleware`)."""
    from skiff.metadata.server.console.actions import actions_router
    from skiff.metadata.server.console.context import ConsoleContext
    from skiff.metadata.server.console.login import public_router
    from skiff.metadata.server.console.routes import pages_router
    from skiff.metadata.server.console.session import ConsoleGate

    ctx = ConsoleContext(service, auth, lag_sampler)
    app.include_router(public_router(ctx))
    app.include_router(pages_router(ctx))
    app.include_router(actions_router(ctx))
    app.add_middleware(ConsoleGate, auth=auth)  # outermost: the cookie becomes a bearer token first
    app.state.console = ctx
