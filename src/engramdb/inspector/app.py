"""The inspector's web app: Starlette routes over `engramdb.inspector.views`, server-rendered with
Jinja2, guarded by an access token.

Every request — pages, JSON and static files alike — must carry the token: as ``?token=`` on
the first visit (answered with an HttpOnly, SameSite=Strict cookie and a redirect to the same
address without it, so the token leaves the address bar and the history) or as that cookie.
Anything else is a 403. Only GET and HEAD exist. Responses carry a Content-Security-Policy that
allows this origin only (no remote scripts, styles, images or connections, no inline script), and
are never cached.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

import engramdb.inspector.views as views  # the module itself, not the package (no import cycle)
from engramdb.errors import CallerError, NotFound, ValidationError

if TYPE_CHECKING:
    from engramdb.agent import Agent

HERE = Path(__file__).resolve().parent
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "font-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
REFUSED = "engramdb inspector: refused. Open the address printed at start (it carries ?token=…).\n"
Endpoint = Callable[[Request], Awaitable[Response]]


def cookie_name(token: str) -> str:
    """The cookie holding `token`: named after a digest of it, so two inspectors on one host
    (cookies ignore the port) do not overwrite each other's."""
    return "engramdb_inspector_" + hashlib.sha256(token.encode()).hexdigest()[:12]


def same_origin_path(path: str) -> str:
    """`path` as a redirect target that can only name this server: percent-encoded (a backslash,
    tab or newline, which browsers fold into a slash or drop, cannot survive as one) and with one
    leading slash ("//evil.example/" would be another host to a browser)."""
    return "/" + quote(path, safe="/:@!$&'()*+,;=-._~").lstrip("/")


class _Guard(BaseHTTPMiddleware):
    """The token check in front of every route, and the security headers on every answer."""

    def __init__(self, app: Any, token: str) -> None:
        super().__init__(app)
        self.token = token
        self.cookie = cookie_name(token)

    def _ok(self, given: str | None) -> bool:
        return given is not None and secrets.compare_digest(given.encode(), self.token.encode())

    async def dispatch(self, request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        if request.method not in ("GET", "HEAD"):
            response: Response = PlainTextResponse("engramdb inspector: read-only; only GET.\n", status_code=405)
        elif "token" in request.query_params:
            if self._ok(request.query_params["token"]):
                rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
                target = same_origin_path(request.url.path) + ("?" + urlencode(rest) if rest else "")
                response = RedirectResponse(target, status_code=303)
                response.set_cookie(self.cookie, self.token, httponly=True, samesite="strict", path="/")
            else:
                response = PlainTextResponse(REFUSED, status_code=403)
        elif self._ok(request.cookies.get(self.cookie)):
            response = await call_next(request)
        else:
            response = PlainTextResponse(REFUSED, status_code=403)
        response.headers["Content-Security-Policy"] = CSP
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        if not request.url.path.startswith("/static/"):
            response.headers["Cache-Control"] = "no-store"  # pages hold memory text
        return response


class Inspector:
    """The app serving one agent's view; ``.app`` is the ASGI application, ``.token`` its secret."""

    def __init__(self, agent: Agent, *, token: str | None = None) -> None:
        self.agent = agent
        self.token = token or secrets.token_urlsafe(32)
        self.templates = Environment(
            loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(["html"]), auto_reload=False
        )
        self.templates.globals["who"] = {
            "agent": agent.agent_id,
            "tenant": agent.tenant,
            "cap": agent.cap.name.lower(),
        }
        routes = [
            Route("/", self._page("list.html", self._list)),
            Route("/memory/{id}", self._page("memory.html", self._memory)),
            Route("/graph/{id}", self._page("graph.html", self._graph)),
            Route("/recall", self._page("recall.html", self._recall)),
            Route("/stats", self._page("stats.html", self._stats)),
            Route("/tables", self._page("tables.html", self._tables)),
            Route("/api/memories", self._json(self._list)),
            Route("/api/memory/{id}", self._json(self._memory)),
            Route("/api/graph/{id}", self._json(self._graph)),
            Route("/api/recall", self._json(self._recall)),
            Route("/api/stats", self._json(self._stats)),
            Route("/api/tables", self._json(self._tables)),
            Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
        ]
        self.app = Starlette(
            routes=routes,
            middleware=[
                # A page of another site rebinding its name to 127.0.0.1 would send its own Host.
                Middleware(TrustedHostMiddleware, allowed_hosts=["127.0.0.1", "localhost"]),
                Middleware(_Guard, token=self.token),
            ],
        )

    # -- what each route reads (in a worker thread: the engine's calls block) -----------------

    def _list(self, r: Request) -> dict[str, Any]:
        p = r.query_params
        return views.memory_list(
            self.agent, q=p.get("q", "").strip(), type=p.get("type", ""), tag=p.get("tag", ""),
            status=p.get("status", "active") or "active", page=views.page_number(p.get("page")),
        )  # fmt: skip

    def _memory(self, r: Request) -> dict[str, Any]:
        return views.memory_detail(self.agent, r.path_params["id"])

    def _graph(self, r: Request) -> dict[str, Any]:
        depth = r.query_params.get("depth", "1")
        return views.graph(self.agent, r.path_params["id"], int(depth) if depth in ("1", "2") else 0)

    def _recall(self, r: Request) -> dict[str, Any]:
        p = r.query_params
        q = p.get("q", "").strip()
        k, hops = p.get("k", "5"), p.get("hops", "1")
        if not (k.isdigit() and 1 <= int(k) <= 50) or not (hops.isdigit() and int(hops) <= 3):
            raise ValidationError("k must be 1–50 and hops 0–3")
        if not q:
            return {"query": "", "k": int(k), "hops": int(hops), "hits": [], "near_misses": [], "parts": []}
        return views.playground(self.agent, q, k=int(k), hops=int(hops))

    def _stats(self, r: Request) -> dict[str, Any]:
        return views.stats(self.agent)

    def _tables(self, r: Request) -> dict[str, Any]:
        p = r.query_params
        data = views.tables(self.agent)
        if p.get("table"):
            data["rows"] = views.table_rows(self.agent, p["table"], page=views.page_number(p.get("page")))
        if p.get("sql", "").strip():
            data["result"] = views.run_select(self.agent, p["sql"].strip())
        data["sql"] = p.get("sql", "")
        return data

    # -- rendering ----------------------------------------------------------------------------

    def _page(self, template: str, read: Callable[[Request], dict[str, Any]]) -> Endpoint:
        async def endpoint(request: Request) -> Response:
            try:
                data = await run_in_threadpool(read, request)
            except NotFound as exc:
                return self._render("error.html", {"status": 404, "message": str(exc)}, 404)
            except CallerError as exc:
                return self._render("error.html", {"status": 400, "message": str(exc)}, 400)
            return self._render(template, data, 200)

        return endpoint

    def _json(self, read: Callable[[Request], dict[str, Any]]) -> Endpoint:
        async def endpoint(request: Request) -> Response:
            try:
                data = await run_in_threadpool(read, request)
            except NotFound as exc:
                return JSONResponse({"error": "NotFound", "message": str(exc)}, status_code=404)
            except CallerError as exc:
                return JSONResponse({"error": type(exc).__name__, "message": str(exc)}, status_code=400)
            return JSONResponse(data)

        return endpoint

    def _render(self, template: str, data: dict[str, Any], status: int) -> HTMLResponse:
        html = self.templates.get_template(template).render(d=data)
        return HTMLResponse(html, status_code=status)
