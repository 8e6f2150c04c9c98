"""The operator's approval page (`/oauth/approve`): GET shows a pending authorization (which client, where the
browser returns), POST takes the operator's decision and token (OAuthProvider.approve). Never framed, never
cached, no referrer."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

from relay_shell.auth.oauth import OAuthProvider, client_label_of

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

MAX_FORM_BYTES = 8192

_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>relay-shell: approve a client</title>
<style>body{{font-family:sans-serif;max-width:40em;margin:3em auto}}code{{word-break:break-all}}</style></head>
<body><h1>Approve an MCP client?</h1>
<p><b>{client_name}</b> (client id <code>{client_id}</code>) asks to operate this relay-shell server: run commands
on this host and its SSH fleet, under this server's policy and audit log.</p>
<p>After approval the browser returns to <code>{redirect_uri}</code>.</p>
<p style="color:#a00">{message}</p>
<form method="post" action="/oauth/approve">
<input type="hidden" name="request" value="{request_id}">
<label>Operator token (a token from relay-shell's token file):
<input type="password" name="token" autocomplete="off" size="50"></label>
<p><button name="decision" value="approve">Approve</button> <button name="decision" value="deny">Deny</button></p>
</form></body></html>
"""

_HEADERS = {
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",  # no clickjacking of the approve button
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'",
    "Referrer-Policy": "no-referrer",
}


def approval_page(provider: OAuthProvider, request_id: str, message: str, status_code: int = 200) -> Response:
    from starlette.responses import HTMLResponse

    pending = provider.pending.get(request_id)
    if pending is None:
        return HTMLResponse(
            "<!doctype html><p>This authorization request is unknown or has expired. Start again from the client.",
            status_code=400,
            headers=_HEADERS,
        )
    client = provider.clients.get(pending.client_id, {})
    page = _PAGE.format(
        client_name=html.escape(client_label_of(client)),
        client_id=html.escape(pending.client_id),
        redirect_uri=html.escape(str(pending.params.redirect_uri)),
        message=html.escape(message),
        request_id=html.escape(request_id),
    )
    return HTMLResponse(page, status_code=status_code, headers=_HEADERS)


async def approval_endpoint(provider: OAuthProvider, request: Request) -> Response:
    """GET shows the pending authorization; POST takes the operator's decision and token."""
    from starlette.responses import HTMLResponse, RedirectResponse

    if request.method == "GET":
        return approval_page(provider, request.query_params.get("request", ""), "")
    if int(request.headers.get("content-length") or 0) > MAX_FORM_BYTES:
        return HTMLResponse("form too large", status_code=413, headers=_HEADERS)
    form = await request.form(max_files=0, max_fields=8)
    request_id = str(form.get("request") or "")
    answer, problem = provider.approve(request_id, str(form.get("token") or ""), form.get("decision") == "approve")
    if problem == "retry":
        return approval_page(provider, request_id, answer, status_code=401)
    if problem is not None:
        return HTMLResponse(f"<!doctype html><p>{html.escape(answer)}", status_code=400, headers=_HEADERS)
    return RedirectResponse(answer, status_code=303, headers={"Cache-Control": "no-store"})
