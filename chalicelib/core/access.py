"""Who may call the API: the authentication mode and the CORS origin, read at import time.

Chalice fixes a route's authorizer, ``api_key_required`` and CORS settings when ``app.py`` is
imported, and ``chalice deploy`` / ``package`` import it with the stage's environment already
set. So these settings are read once, at import, not lazily like the other settings; a bad
value fails the import (and so the packaging) with a message naming the variable.

Modes (``SAGEGATE_AUTH``):

* ``none``: open (``local`` and ``test`` stages). On Lambda, only with
  ``SAGEGATE_OPEN_API=true`` beside it: a deployed API is open because someone said so.
* ``api-key``: API Gateway API keys (``x-api-key``) with a usage plan (rate, burst, quota).
* ``iam``: SigV4-signed requests; callers need ``execute-api:Invoke`` on the API.
* ``cognito``: a Cognito user pool's ID token in ``Authorization``
  (``COGNITO_USER_POOL_ARNS``, comma-separated).

On Lambda the mode must be set explicitly: a function whose ``SAGEGATE_AUTH`` is missing or
blank refuses to start (its import fails, so every request is an error and nothing is open),
and packaging (:mod:`sagegate.deploy.stages`) refuses such a stage before it is deployed.

``/health`` stays open in every mode. ``CORS_ALLOW_ORIGIN`` is one origin
(``https://app.example.com``), empty for no CORS headers at all, or ``*``, which is refused
with any authentication mode: a wildcard is for local development only.
"""
from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Mapping

from chalicelib.core.config_names import (
    COGNITO_USER_POOL_ARNS,
    CORS_ALLOW_ORIGIN,
    SAGEGATE_AUTH,
    SAGEGATE_OPEN_API,
)
from chalicelib.core.errors import ConfigurationError


class AuthMode(enum.StrEnum):
    """The values of ``SAGEGATE_AUTH`` (the templates, IAM and docs use these names)."""

    NONE = "none"
    API_KEY = "api-key"
    IAM = "iam"
    COGNITO = "cognito"


AUTH_MODES = tuple(AuthMode)
ANY_ORIGIN = "*"

_ORIGIN_RE = re.compile(r"^https?://[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]{1,5})?\Z")
_USER_POOL_ARN_RE = re.compile(
    r"^arn:aws[a-z-]*:cognito-idp:[a-z0-9-]+:[0-9]{12}:userpool/[a-z0-9-]+_[A-Za-z0-9]+\Z")


@dataclasses.dataclass(frozen=True)
class Access:
    """The API's access rules (see the module)."""

    auth: AuthMode = AuthMode.NONE
    cors_origin: str = ""
    user_pool_arns: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _check(self.auth in AUTH_MODES, SAGEGATE_AUTH,
               f"must be one of {', '.join(AUTH_MODES)}")
        _check(self.cors_origin in ("", ANY_ORIGIN) or bool(_ORIGIN_RE.match(self.cors_origin)),
               CORS_ALLOW_ORIGIN, "must be one origin (scheme://host[:port]), '*' or empty")
        _check(self.cors_origin != ANY_ORIGIN or self.auth == AuthMode.NONE, CORS_ALLOW_ORIGIN,
               f"may be '*' only when {SAGEGATE_AUTH} is 'none' (local development); "
               "name the origin of your web app")
        if self.auth == AuthMode.COGNITO:
            _check(bool(self.user_pool_arns), COGNITO_USER_POOL_ARNS,
                   f"must be set when {SAGEGATE_AUTH} is 'cognito'")
        for arn in self.user_pool_arns:
            _check(bool(_USER_POOL_ARN_RE.match(arn)), COGNITO_USER_POOL_ARNS,
                   "must be Cognito user pool ARNs, comma-separated")

    @property
    def protected(self) -> bool:
        return self.auth != AuthMode.NONE

    @classmethod
    def from_env(cls, env: Mapping[str, str], deployed: bool = False) -> Access:
        """The access rules in ``env``; ``deployed``: on Lambda, where the mode must be
        explicit (ConfigurationError naming the variable otherwise)."""
        arns = tuple(arn.strip() for arn in env.get(COGNITO_USER_POOL_ARNS, "").split(",")
                     if arn.strip())
        auth = env.get(SAGEGATE_AUTH, "").strip().lower()
        if deployed:
            _check(bool(auth), SAGEGATE_AUTH, "is not set: a deployed function must name its "
                   f"authentication ({', '.join(AUTH_MODES)})")
            open_api = env.get(SAGEGATE_OPEN_API, "").strip().lower() == "true"
            _check(auth != AuthMode.NONE or open_api, SAGEGATE_AUTH,
                   f"is 'none' on Lambda: set {SAGEGATE_OPEN_API}=true too if the API is meant "
                   "to be open to anyone")
        return cls(auth=_auth_mode(auth or AuthMode.NONE),
                   cors_origin=env.get(CORS_ALLOW_ORIGIN, "").strip(), user_pool_arns=arns)


def _auth_mode(text: str) -> AuthMode:
    try:
        return AuthMode(text)
    except ValueError:
        raise ConfigurationError(
            f"{SAGEGATE_AUTH} must be one of {', '.join(AUTH_MODES)}, not {text[:32]!r}") from None


def _check(ok: bool, name: str, requirement: str) -> None:
    if not ok:
        raise ConfigurationError(f"{name} {requirement}")
