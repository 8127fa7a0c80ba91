"""The console's public routes: the login page, signing out, and the stylesheet.

`POST /console/login` checks the token against the service's token table (in constant
time, `TokenTable.caller_for`) and, if it is known and may at least view (reader or
admin), stores it in the console's cookie (console.session) and redirects to the page
asked for; otherwise it shows the form again with the reason. It answers 200 either way:
a public route of the service answers without a token. With authentication off the login
page only points to the console. Forms are read with `parse_form` (URL-encoded, at most
`MAX_FORM_BYTES`), so no multipart parser is needed.
"""

from __future__ import annotations

from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from skiff.metadata.server.auth import public
from skiff.metadata.server.console.context import HERE, SECURITY_HEADERS, ConsoleContext
from skiff.metadata.server.console.session import (
    LOGIN_PATH,
    LOGOUT_PATH,
    PREFIX,
    TOKEN_COOKIE,
    cookie_header,
    encode_token,
    safe_next,
)
from skiff.metadata.wire.roles import ADMIN, READER

MAX_FORM_BYTES = 64 * 1024
STYLESHEET = "/console/static/console.css"
# The login cookie lasts a working day; the token itself never expires on its own.
COOKIE_MAX_AGE_S = 12 * 3600


async def parse_form(request: Request) -> dict[str, str]:
    """A URL-encoded form's fields (the last value of each); {} for a body that is too
    large or not a form."""
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        return {}
    try:
        fields = parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=256)
    except (UnicodeDecodeError, ValueError):
        return {}
    return {k: v[-1] for k, v in fields.items()}


def public_router(ctx: ConsoleContext) -> APIRouter:
    router = APIRouter(dependencies=[public()], include_in_schema=False)
    css = (HERE / "static" / "console.css").read_bytes()

    @router.get(STYLESHEET)
    def stylesheet() -> Response:
        return Response(css, media_type="text/css", headers={"Cache-Control": "max-age=3600"})

    @router.get(LOGIN_PATH, response_class=HTMLResponse)
    def login_page(request: Request) -> Response:
        if not ctx.auth.enabled:
            return RedirectResponse(PREFIX, status_code=303)
        return _login(ctx, request, safe_next(request.query_params.get("next")), "")

    @router.post(LOGIN_PATH, response_class=HTMLResponse)
    async def login(request: Request) -> Response:
        form = await parse_form(request)
        target = safe_next(form.get("next"))
        tokens = ctx.auth.tokens
        if tokens is None:
            return RedirectResponse(target, status_code=303)
        token = form.get("token", "").strip()
        caller = tokens.caller_for(token) if token else None
        if caller is None:
            return _login(ctx, request, target, "Unknown token." if token else "Enter a token.")
        if not caller.roles & {READER, ADMIN}:
            return _login(ctx, request, target, "This token has no reader or admin role.")
        response = RedirectResponse(target, status_code=303)
        response.headers.append(
            "set-cookie",
            cookie_header(request.scope, TOKEN_COOKIE, encode_token(token), max_age_s=COOKIE_MAX_AGE_S),
        )
        return response

    @router.get(LOGOUT_PATH, response_class=HTMLResponse)
    def logout(request: Request) -> Response:
        response = _login(ctx, request, PREFIX, "")
        response.headers.append("set-cookie", cookie_header(request.scope, TOKEN_COOKIE, "", max_age_s=0))
        return response

    return router


def _login(ctx: ConsoleContext, request: Request, target: str, error: str) -> HTMLResponse:
    html = ctx.env.get_template("login.html").render(
        title="Sign in", bare=True, next=target, error=error, now=""
    )
    return HTMLResponse(html, headers=SECURITY_HEADERS)
