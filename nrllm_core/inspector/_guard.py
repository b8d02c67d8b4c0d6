"""The inspector's gate: the token, the cookie, the origin check and the security headers."""

from __future__ import annotations

import hashlib
import hmac
from typing import TYPE_CHECKING, Final, final
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["SECURITY_HEADERS", "Guard", "cookie_name"]

SECURITY_HEADERS: Final = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
_SAFE_METHODS: Final = frozenset({"GET", "HEAD"})


@final
class Guard:
    """ASGI middleware in front of every route, static files included.

    A valid ``?token=`` is exchanged for a cookie and a redirect, so the token leaves the
    address bar and the history. Anything else needs the cookie. A request that can change
    state must come from a page this server served: its Origin (or Referer) is checked.
    """

    __slots__ = ("_app", "_cookie", "_token")

    def __init__(self, app: ASGIApp, *, token: str) -> None:
        if not token:
            raise ValueError("the inspector needs a non-empty token")
        self._app = app
        self._token = token.encode()
        self._cookie = cookie_name(token)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        from starlette.datastructures import MutableHeaders
        from starlette.requests import Request

        request = Request(scope)
        refusal = self._refusal(request)
        if refusal is not None:
            await refusal(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers[name] = value
            await send(message)

        await self._app(scope, receive, send_with_headers)

    def _refusal(self, request: Request) -> Response | None:
        """The response that ends this request here, or ``None`` to let it through."""
        offered = request.query_params.get("token")
        if offered is not None:
            if not self._valid(offered) or request.method not in _SAFE_METHODS:
                return _plain(401, "This address holds no valid token.")
            return self._exchange(request, offered)
        if not self._valid(request.cookies.get(self._cookie, "")):
            return _plain(
                401, "A token is required: open the address that nrllm serve printed at start."
            )
        if request.method not in _SAFE_METHODS and not _same_origin(request):
            return _plain(403, "This request did not come from a page of this inspector.")
        return None

    def _valid(self, offered: str) -> bool:
        return hmac.compare_digest(offered.encode(), self._token)

    def _exchange(self, request: Request, offered: str) -> Response:
        from starlette.responses import RedirectResponse

        clean = request.url.remove_query_params("token")
        # One leading slash: a browser reads "//host/" and "/\host/" as another site.
        target = "/" + clean.path.lstrip("/\\") + (f"?{clean.query}" if clean.query else "")
        response = RedirectResponse(target, status_code=303)
        # Under a mount the cookie goes only to this app's own paths.
        path = request.scope.get("root_path", "").rstrip("/") or "/"
        response.set_cookie(self._cookie, offered, httponly=True, samesite="strict", path=path)
        _secure(response)
        return response


def cookie_name(token: str) -> str:
    """The cookie that carries ``token``: one name per token, never shared between inspectors.

    Browsers do not keep cookies apart by port, so one fixed name would let two inspectors on
    the same host name overwrite each other's cookie.
    """
    digest = hashlib.sha256(b"nrllm-inspector-cookie\x00" + token.encode()).hexdigest()
    return f"nrllm_inspector_{digest[:16]}"


def _same_origin(request: Request) -> bool:
    claimed = request.headers.get("origin")
    if claimed is None:
        referer = urlsplit(request.headers.get("referer", ""))
        claimed = f"{referer.scheme}://{referer.netloc}" if referer.netloc else None
    served = f"{request.url.scheme}://{request.headers.get('host', '')}"
    return claimed is not None and hmac.compare_digest(claimed.lower(), served.lower())


def _plain(status: int, text: str) -> Response:
    from starlette.responses import PlainTextResponse

    response = PlainTextResponse(text, status_code=status)
    _secure(response)
    return response


def _secure(response: Response) -> None:
    for name, value in SECURITY_HEADERS.items():
        response.headers[name] = value
