"""A tiny JSON-over-HTTP client on the standard library (the wheel may depend on nothing else).

Every call has a timeout; connection failures, HTTP errors and undecodable bodies become
SmokeEnvironmentError with the URL in the message.
"""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request

from .errors import SmokeEnvironmentError


class HttpStatusError(SmokeEnvironmentError):
    """The server answered, with a non-2xx status."""

    code = "http-status"

    def __init__(self, url: str, status: int, body: str) -> None:
        super().__init__(f"{url} answered HTTP {status}: {body[:300]}")
        self.status = status


class RequestTimeout(SmokeEnvironmentError):
    """No answer within the request's timeout."""

    code = "request-timeout"

    def __init__(self, url: str, timeout: float) -> None:
        super().__init__(
            f"{url} did not answer within {timeout:.1f} s",
            "raise --timeout (per request) or --deadline (whole run) for a slow server",
        )


def _request(url: str, data: bytes | None, timeout: float) -> bytes:
    headers = {"Content-Type": "application/json"} if data is not None else {}
    req = urllib.request.Request(url, data=data, headers=headers, method="POST" if data is not None else "GET")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.read()
    except urllib.error.HTTPError as exc:
        body = exc.read().decode("utf-8", errors="replace") if exc.fp else ""
        raise HttpStatusError(url, exc.code, body) from None
    except TimeoutError as exc:
        raise RequestTimeout(url, timeout) from exc
    except (urllib.error.URLError, ConnectionError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, (socket.timeout, TimeoutError)):
            raise RequestTimeout(url, timeout) from None
        raise SmokeEnvironmentError(
            f"cannot reach {url}: {reason}",
            "check the URL and that the server is up (curl URL/health); raise --timeout for slow servers",
        ) from None


def _decode_json(url: str, raw: bytes):
    try:
        return json.loads(raw)
    except ValueError:
        raise SmokeEnvironmentError(
            f"{url} did not answer JSON (got {raw[:120]!r}): this does not look like an SGLang server",
            "point --target at the SGLang HTTP port (default 30000)",
        ) from None


def get_text(url: str, timeout: float) -> str:
    return _request(url, None, timeout).decode("utf-8", errors="replace")


def get_json(url: str, timeout: float):
    return _decode_json(url, _request(url, None, timeout))


def post_json(url: str, payload: dict, timeout: float):
    return _decode_json(url, _request(url, json.dumps(payload).encode(), timeout))


def get_status(url: str, timeout: float) -> int:
    """The HTTP status of a GET (0 when the server cannot be reached)."""
    try:
        _request(url, None, timeout)
        return 200
    except HttpStatusError as exc:
        return exc.status
    except SmokeEnvironmentError:
        return 0
