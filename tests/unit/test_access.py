"""Access rules read at import: authentication mode, CORS origin, Cognito pools."""
from __future__ import annotations

import pytest

from chalicelib.core.access import Access
from chalicelib.core.errors import ConfigurationError

POOL = "arn:aws:cognito-idp:eu-west-1:123456789012:userpool/eu-west-1_AbCdEfGhI"


def test_defaults_to_open_without_cors() -> None:
    access = Access.from_env({})
    assert access == Access(auth="none", cors_origin="", user_pool_arns=())
    assert not access.protected


@pytest.mark.parametrize("mode", ["api-key", "iam", "API-KEY", " iam "])
def test_reads_the_authentication_mode(mode: str) -> None:
    access = Access.from_env({"SAGEGATE_AUTH": mode})
    assert access.auth == mode.strip().lower()
    assert access.protected


def test_cognito_takes_comma_separated_user_pools() -> None:
    access = Access.from_env({"SAGEGATE_AUTH": "cognito",
                              "COGNITO_USER_POOL_ARNS": f"{POOL}, {POOL.replace('AbC', 'XyZ')}"})
    assert access.user_pool_arns == (POOL, POOL.replace("AbC", "XyZ"))


@pytest.mark.parametrize("env,name", [
    ({"SAGEGATE_AUTH": "basic"}, "SAGEGATE_AUTH"),
    ({"SAGEGATE_AUTH": "cognito"}, "COGNITO_USER_POOL_ARNS"),
    ({"SAGEGATE_AUTH": "cognito", "COGNITO_USER_POOL_ARNS": "my-pool"}, "COGNITO_USER_POOL_ARNS"),
    ({"CORS_ALLOW_ORIGIN": "https://app.example.com/path"}, "CORS_ALLOW_ORIGIN"),
    ({"CORS_ALLOW_ORIGIN": "https://a.example.com,https://b.example.com"}, "CORS_ALLOW_ORIGIN"),
    ({"CORS_ALLOW_ORIGIN": "app.example.com"}, "CORS_ALLOW_ORIGIN"),
])
def test_rejects_bad_values_naming_the_variable(env: dict[str, str], name: str) -> None:
    with pytest.raises(ConfigurationError, match=name):
        Access.from_env(env)


@pytest.mark.parametrize("mode", ["api-key", "iam", "cognito"])
def test_refuses_any_origin_once_authentication_is_on(mode: str) -> None:
    env = {"SAGEGATE_AUTH": mode, "CORS_ALLOW_ORIGIN": "*", "COGNITO_USER_POOL_ARNS": POOL}
    with pytest.raises(ConfigurationError, match="only when SAGEGATE_AUTH is 'none'"):
        Access.from_env(env)


@pytest.mark.parametrize("origin", ["*", "https://app.example.com", "http://localhost:3000"])
def test_accepts_one_origin_or_any_for_local_development(origin: str) -> None:
    assert Access.from_env({"CORS_ALLOW_ORIGIN": origin}).cors_origin == origin
