"""A stage's authentication under ``chalice local``, as far as this machine can honestly check
it.

``chalice local`` does not check API keys. :mod:`sagegate.local.chalice_local` checks them as API
Gateway does (403 ``{"message":"Forbidden"}`` unless ``x-api-key`` is the key) against one local
key: ``SAGEGATE_LOCAL_API_KEY``, else a fresh random one per run, printed in ``sagegate run``'s
ready lines.

IAM (SigV4) and Cognito cannot be checked here: a signature is checked against the caller's real
credentials and a token against its user pool's keys, both in AWS, and ``chalice local`` lets
such requests in unchecked. ``sagegate run`` refuses them with one line rather than serve a
protected stage open. Besides the standard library it imports only :mod:`chalicelib.core.access`
(and its config and errors), none of which costs.
"""
from __future__ import annotations

import secrets
from collections.abc import Mapping

from chalicelib.core.access import Access, AuthMode

API_KEY_ENV = "SAGEGATE_LOCAL_API_KEY"
API_KEY_HEADER = "x-api-key"
FORBIDDEN_BODY = b'{"message":"Forbidden"}'
"""API Gateway's answer (403) to a missing or wrong API key."""
FORBIDDEN_HEADERS = {"x-amzn-ErrorType": "ForbiddenException"}

_UNCHECKABLE = {  # chalicelib.core.access.AuthMode's values
    "iam": "IAM (SigV4 signatures, checked against real AWS credentials)",
    "cognito": "Cognito (ID tokens, checked against the user pool's keys in AWS)",
}


class UncheckableAuth(Exception):
    """The stage's authentication cannot be checked locally; the message says what to do."""


def new_api_key() -> str:
    """A random key shaped as API Gateway's own (40 characters, letters and digits)."""
    return secrets.token_hex(20)


def configured_key(environ: Mapping[str, str]) -> str:
    return environ.get(API_KEY_ENV, "").strip()


def local_api_key(stage: str, env: Mapping[str, str]) -> str | None:
    """The key ``chalice local`` will require (None: the stage is open); ``env`` is what sagegate
    will see under the stage.

    Raises:
        UncheckableAuth: the stage uses IAM or Cognito, which cannot be checked locally.
        ConfigurationError: the stage's authentication settings are wrong.
    """

    auth = Access.from_env(env).auth
    if auth in _UNCHECKABLE:
        raise UncheckableAuth(
            f"stage {stage!r} authenticates with {_UNCHECKABLE[auth]}, which cannot be checked "
            "on this machine (chalice local would let every request in): run a stage with "
            "api-key or no authentication locally (e.g. --stage dev or local) and test "
            f"{auth} against a deployed stage")
    if auth == AuthMode.API_KEY:
        return configured_key(env) or new_api_key()
    return None
