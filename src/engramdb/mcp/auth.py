"""Who may call the HTTP MCP server, and as which agent: bearer tokens checked by the SDK's own
resource-server machinery (`TokenVerifier`, ``WWW-Authenticate``, protected-resource metadata).

Two modes:

- `StaticToken`: one secret for one user. The token only authenticates; the agent, tenant and cap
  are the server's own (``--agent``, ``--tenant``, ``--cap``).
- `JwtTokens`: JSON Web Tokens from the team's issuer, signed with its key (HS256 secret, or an
  RS/ES/EdDSA public key), with ``iss``, ``aud`` (this server's URL), ``exp`` and ``sub`` required
  and checked. The token says who acts: ``sub`` is the agent id, ``tenant`` its tenant
  (``default`` when absent), ``cap`` the most confidential level it may read (never above the
  server's ``--cap``). So one server serves many agents, and the engine's own walls — tenant,
  namespace, cap — keep each to its own memories.

A token that fails any check is refused with 401 before any tool runs; its text is never logged.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jwt
from mcp.server.auth.provider import AccessToken

from engramdb.errors import CallerError, ConfigError
from engramdb.memories.model import Confidentiality
from engramdb.tenancy.ids import check_agent_id, check_tenant

#: the scope every accepted token is given (the SDK's bearer middleware checks required scopes)
SCOPE = "memory"
#: what the static mode calls its one client
STATIC_CLIENT = "engramdb-static-token"
#: the signing algorithms accepted; "none" never is
ALGORITHMS = ("HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "PS256", "ES256", "ES384", "EdDSA")
#: the shortest static token or HS secret accepted, in bytes (RFC 7518 §3.2 asks HS256 keys of 256 bits)
MIN_SECRET = 32


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a call acts as."""

    agent_id: str
    tenant: str
    cap: Confidentiality


class StaticToken:
    """One bearer token, compared in constant time; the caller is the server's own agent."""

    def __init__(self, token: str) -> None:
        if not isinstance(token, str) or len(token.encode()) < MIN_SECRET or token != token.strip():
            raise ConfigError(
                f"the static bearer token must be at least {MIN_SECRET} bytes with no surrounding spaces "
                '(make one with: python -c "import secrets; print(secrets.token_urlsafe(32))")'
            )
        self._token = token.encode()

    async def verify_token(self, token: str) -> AccessToken | None:
        if not hmac.compare_digest(token.encode("utf-8", "surrogateescape"), self._token):
            return None
        return AccessToken(token="", client_id=STATIC_CLIENT, scopes=[SCOPE])

    def identity(self, token: AccessToken, server: Identity) -> Identity:
        return server


class JwtTokens:
    """Signed JWTs of one issuer for one audience; the claims name the agent, tenant and cap.

    Args:
        key: the HS secret, or the issuer's public key (PEM).
        algorithms: the algorithms accepted (one family: an HS secret cannot check an RS token).
        issuer: the ``iss`` every token must carry.
        audience: the ``aud`` every token must carry: this server's URL.
        leeway: seconds of clock skew allowed on ``exp`` / ``nbf`` / ``iat``.
        clock: seconds since the epoch (tests inject one).
    """

    def __init__(
        self,
        key: str | bytes,
        *,
        algorithms: Sequence[str],
        issuer: str,
        audience: str,
        leeway: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        algorithms = list(algorithms)
        bad = [a for a in algorithms if a not in ALGORITHMS]
        if not algorithms or bad:
            raise ConfigError(f"unknown JWT algorithm(s) {bad or algorithms}; choose from {', '.join(ALGORITHMS)}")
        if len({a[:2] for a in algorithms}) > 1:
            raise ConfigError(
                "give algorithms of one family (HS…, or RS/PS…, or ES…, or EdDSA): one key checks one family"
            )
        if not issuer or not audience:
            raise ConfigError("a JWT verifier needs the issuer (iss) and this server's URL as the audience (aud)")
        raw = key.encode() if isinstance(key, str) else key
        if algorithms[0].startswith("HS"):
            if len(raw) < MIN_SECRET:
                raise ConfigError(f"an HS secret must be at least {MIN_SECRET} bytes")
            if raw.lstrip().startswith(b"-----BEGIN"):
                # a public key used as an HMAC secret lets anyone who has it sign tokens
                raise ConfigError("that key is a PEM key: verify RS/ES/EdDSA tokens with it, not HS ones")
            self._key: Any = raw
        else:
            try:
                self._key = jwt.algorithms.get_default_algorithms()[algorithms[0]].prepare_key(raw)
            except (ValueError, TypeError, KeyError, jwt.InvalidKeyError) as exc:
                raise ConfigError(f"cannot read the JWT public key for {algorithms[0]}: {exc}") from None
        self._algorithms = algorithms
        self._issuer = issuer
        self._audience = audience
        self._leeway = leeway
        self._clock = clock

    @property
    def audience(self) -> str:
        """The ``aud`` tokens must carry: this server's URL (published as the protected resource)."""
        return self._audience

    @property
    def issuer(self) -> str:
        """The ``iss`` tokens must carry (published as the authorization server)."""
        return self._issuer

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            claims = jwt.decode(
                token,
                self._key,
                algorithms=self._algorithms,
                audience=self._audience,
                issuer=self._issuer,
                leeway=self._leeway,
                # the times are checked below, on the injected clock (PyJWT reads the wall clock)
                options={
                    "require": ["exp", "iss", "aud", "sub"],
                    "verify_exp": False,
                    "verify_iat": False,
                    "verify_nbf": False,
                },
            )
        except jwt.PyJWTError:
            return None
        now = self._clock()
        times = {name: claims.get(name) for name in ("exp", "nbf", "iat")}
        if any(v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))) for v in times.values()):
            return None
        exp, nbf, iat = times["exp"], times["nbf"], times["iat"]
        if exp is None or exp + self._leeway < now:
            return None
        if (nbf is not None and nbf - self._leeway > now) or (iat is not None and iat - self._leeway > now):
            return None
        try:
            _claimed(claims, Confidentiality.RESTRICTED)
        except CallerError:
            return None
        return AccessToken(
            token="",
            client_id=str(claims.get("azp") or claims.get("client_id") or claims["sub"]),
            scopes=[SCOPE],
            expires_at=int(exp),
            resource=self._audience,
            subject=str(claims["sub"]),
            claims=dict(claims),
        )

    def identity(self, token: AccessToken, server: Identity) -> Identity:
        return _claimed(token.claims or {}, server.cap)


def _claimed(claims: Mapping[str, Any], ceiling: Confidentiality) -> Identity:
    """The identity a token's claims name; `CallerError` when a claim is malformed."""
    agent = check_agent_id(claims.get("sub"))
    tenant = check_tenant(claims.get("tenant", "default"))
    cap_name = claims.get("cap", ceiling.name.lower())
    if not isinstance(cap_name, str) or cap_name.upper() not in Confidentiality.__members__:
        raise ConfigError(f"the token's cap claim {cap_name!r} is not a confidentiality level")
    return Identity(agent, tenant, min(Confidentiality[cap_name.upper()], ceiling))


Verifier = StaticToken | JwtTokens

__all__ = ["ALGORITHMS", "Identity", "JwtTokens", "StaticToken", "Verifier"]
