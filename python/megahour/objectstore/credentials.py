"""Where the object store's credentials and endpoint come from: the process environment, or the
instance's own identity. Never from the command line, and never printed: messages name the source.

The precedence is the one the store client applies (the AWS SDKs' order): static keys in the
environment, then web identity (a Kubernetes service account), then the container credentials
endpoint, then the instance profile (the EC2-style metadata service many GPU clouds also serve).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

ACCESS_KEY = "AWS_ACCESS_KEY_ID"
SECRET_KEY = "AWS_SECRET_ACCESS_KEY"
DEFAULT_REGION = "us-east-1"  # what S3-compatible stores accept when they ignore regions


class CredentialsError(ValueError):
    """The environment's credential settings contradict each other; the message says which to set."""


@dataclass(frozen=True)
class StoreSettings:
    """What a client needs besides the secrets (which it reads from the environment itself)."""

    credential_source: str
    endpoint: str  # empty: AWS's own endpoint for the region
    region: str
    ca_bundle: str  # empty: the system's trust store

    @property
    def allow_http(self) -> bool:
        return self.endpoint.startswith("http://")


def credential_source(env: Mapping[str, str]) -> str:
    """A description of where the credentials come from, safe to print (it holds no secret)."""
    has_key, has_secret = bool(env.get(ACCESS_KEY)), bool(env.get(SECRET_KEY))
    if has_key != has_secret:
        have, lack = (ACCESS_KEY, SECRET_KEY) if has_key else (SECRET_KEY, ACCESS_KEY)
        raise CredentialsError(
            f"{have} is set in the environment without {lack}: set both, or neither to use the "
            "instance's own identity"
        )
    if has_key:
        token = " with AWS_SESSION_TOKEN" if env.get("AWS_SESSION_TOKEN") else ""
        return f"{ACCESS_KEY}/{SECRET_KEY} from the environment{token}"
    if env.get("AWS_WEB_IDENTITY_TOKEN_FILE"):
        return "web identity (AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN from the environment)"
    if env.get("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI") or env.get("AWS_CONTAINER_CREDENTIALS_FULL_URI"):
        return "the container credentials endpoint (AWS_CONTAINER_CREDENTIALS_*)"
    return f"the instance profile (no {ACCESS_KEY} in the environment; asked the instance metadata service)"


def settings(env: Mapping[str, str] | None = None) -> StoreSettings:
    env = os.environ if env is None else env
    return StoreSettings(
        credential_source=credential_source(env),
        endpoint=(env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or "").rstrip("/"),
        region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or DEFAULT_REGION,
        ca_bundle=env.get("AWS_CA_BUNDLE", ""),
    )
