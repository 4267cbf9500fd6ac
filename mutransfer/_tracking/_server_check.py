"""Whether a tracking server answers, asked once before anything else is (MLflow's own client retries a dead or silent
server for minutes before it says so): `sweep`, `evaluate`, `predict`, `train --tracking-uri` ask the same way."""

from __future__ import annotations

from urllib.parse import urlsplit

from mutransfer._tracking.runs import CONNECT_SECONDS
from mutransfer.errors import UserInputError

#: seconds an MLflow server may take to answer once connected (a fresh server creates its tables on the first request)
REPLY_SECONDS = 20.0


def check_server_reachable(uri: str, fix: str) -> None:
    """For an http(s):// tracking URI, one GET of MLflow's REST API, no retries, with the credentials MLflow would use
    (MLFLOW_TRACKING_*): a connection within :data:`CONNECT_SECONDS`, an MLflow answer within :data:`REPLY_SECONDS`
    (MLflow's own client retries a dead or silent server for minutes before it says so); a one-line UserInputError
    otherwise. Other stores pass."""
    if urlsplit(uri).scheme not in ("http", "https"):
        return
    from mlflow.exceptions import MlflowException  # noqa: PLC0415 -- deferred: mlflow (~1 s), only when a server is named
    from mlflow.utils.credentials import get_default_host_creds  # noqa: PLC0415 -- deferred: mlflow (~1 s), only when a server is named
    from mlflow.utils.rest_utils import http_request  # noqa: PLC0415 -- deferred: mlflow (~1 s), only when a server is named

    endpoint = "/api/2.0/mlflow/experiments/search"
    try:
        response = http_request(
            get_default_host_creds(uri),
            endpoint,
            "GET",
            max_retries=0,
            timeout=(CONNECT_SECONDS, REPLY_SECONDS),
            raise_on_status=False,
            params={"max_results": 1},
        )
    except (MlflowException, OSError) as exc:
        raise UserInputError(f"tracking URI {uri}: no answer ({_why(exc)}); {fix}") from None
    if response.status_code in (401, 403):
        raise UserInputError(
            f"tracking URI {uri}: the server refused access (HTTP {response.status_code}); set MLFLOW_TRACKING_USERNAME "
            "and MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN) for it"
        )
    try:
        body = response.json() if response.status_code == 200 else None
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise UserInputError(
            f"tracking URI {uri}: answers (HTTP {response.status_code}) but is not an MLflow tracking server "
            f"({endpoint} gave no MLflow reply); point --tracking-uri at `mlflow server`"
        )


def _why(exc: BaseException) -> str:
    """A short reason for a failed HTTP request (requests wraps the socket error deep in its message)."""
    text = str(exc)
    for needle, reason in (
        ("Connection refused", "connection refused"),
        ("timed out", "timed out"),
        ("Name or service not known", "host not known (DNS)"),
        ("Failed to resolve", "host not known (DNS)"),
        ("SSL", "TLS handshake failed"),
    ):
        if needle in text:
            return reason
    text = " ".join(text.split())
    return text[:160] + ("..." if len(text) > 160 else "")
