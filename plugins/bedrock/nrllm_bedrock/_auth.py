"""How a request to Bedrock proves who sends it: a Bedrock API key as a bearer token, or a
SigV4 signature over the request with the AWS credential chain's credentials."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final, final

from nrllm_core import ProviderError

if TYPE_CHECKING:
    from botocore.credentials import Credentials

__all__ = ["SERVICE", "SigV4"]

# The signing name of bedrock-runtime.
SERVICE: Final = "bedrock"
# The headers SigV4 adds; the rest of the signed request is what httpx sends anyway.
_SIGNED: Final = frozenset({"authorization", "x-amz-date", "x-amz-security-token"})


@final
class SigV4:
    """Signs each attempt's URL and body for ``region`` (botocore's ``SigV4Auth``), with the
    given credentials or, resolved on the first request and kept, the standard chain's
    (environment, shared files, SSO, container and instance roles). Refreshable credentials
    are read afresh at every signature."""

    __slots__ = ("_credentials", "_lock", "_provider", "_region")

    def __init__(self, *, provider: str, region: str, credentials: Credentials | None) -> None:
        self._provider = provider
        self._region = region
        self._credentials = credentials
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"SigV4(region={self._region!r})"

    def _resolved(self) -> Credentials:
        with self._lock:
            if self._credentials is None:
                import botocore.session

                # The chain may ask the instance metadata service: only ever on a request.
                self._credentials = botocore.session.Session().get_credentials()
            if self._credentials is None:
                raise ProviderError(
                    f'provider "{self._provider}": no AWS credentials were found to sign with '
                    "(nor a Bedrock API key)"
                )
            return self._credentials

    def __call__(self, url: str, body: bytes) -> Mapping[str, str]:
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest

        frozen = self._resolved().get_frozen_credentials()
        request = AWSRequest(
            method="POST", url=url, data=body, headers={"content-type": "application/json"}
        )
        SigV4Auth(frozen, SERVICE, self._region).add_auth(request)
        return {k: v for k, v in request.headers.items() if k.lower() in _SIGNED}
