#!/usr/bin/python
"""Wait until an SGLang server has no request left (its own load reaches 0), bounded by a timeout.

Why: once the router no longer sends a node anything, the requests it is serving still have to finish
before its container is stopped; SGLang reports them in `GET /v1/loads` (`loads[]`, one entry per DP rank,
`num_running_reqs` + `num_waiting_reqs`) and in the deprecated `GET /get_load` (`num_reqs` per rank), which
this falls back to where /v1/loads is missing. Runs on the node (like the health wait), standard library
only, quiet while it polls; it never fails on a timeout but reports it, so the role decides (stop, or go on).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: sglang_wait_drained
short_description: Wait until an SGLang server's own load (/v1/loads) reaches 0
description:
  - Polls I(base_url)/v1/loads (or /get_load where /v1/loads answers 404) until no request is running or waiting,
    at most I(timeout) seconds. Reports instead of failing when the time is up or the server does not answer.
    A refused connection counts as drained (no server, no request).
options:
  base_url: {description: The server's URL on the node, e.g. http://127.0.0.1:30000, type: str, required: true}
  timeout: {description: Seconds the requests in flight get to finish, type: float, default: 300}
  poll_interval: {description: Seconds between polls, type: float, default: 1}
author: sglang-replayssm-overlay
"""

EXAMPLES = r"""
- name: Let the node's requests finish
  sglang_wait_drained:
    base_url: http://127.0.0.1:30000
    timeout: 300
"""

RETURN = r"""
drained: {description: the server reported no request running or waiting, type: bool, returned: always}
in_flight: {description: requests running + waiting at the last poll (-1 when unknown), type: int, returned: always}
endpoint: {description: the load endpoint that answered (/v1/loads or /get_load), type: str, returned: always}
error: {description: why the load could not be read at the last poll ("" when it could), type: str, returned: always}
waited_s: {description: seconds spent waiting, type: float, returned: always}
"""

REQUEST_TIMEOUT_S = 5.0


class NothingListens(Exception):
    """The connection was refused: no server runs, so no request can be in flight (caught in this module:
    the wait ends drained). Not an `OverlayError`: Ansible ships each module to the node alone, where
    no overlay package can be imported; its stable `code` is unique with the overlay's all the same
    (`tests/structure/test_error_codes.py`)."""

    code = "nothing-listens"


def _get(url: str, timeout: float) -> tuple[int, object]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:
            return reply.status, json.loads(reply.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, None
    except ValueError as exc:
        return 0, f"an answer that is not JSON ({exc})"
    except OSError as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, ConnectionRefusedError):
            raise NothingListens(str(reason)) from exc
        return 0, str(reason)


def in_flight(base_url: str, timeout: float) -> tuple[int, str, str]:
    """(requests running + waiting, endpoint, error); -1 and a reason when the server does not say; 0 when
    nothing listens on the port at all."""
    try:
        return _in_flight(base_url, timeout)
    except NothingListens as exc:
        return 0, "", f"nothing listens ({exc})"


def _in_flight(base_url: str, timeout: float) -> tuple[int, str, str]:
    status, body = _get(base_url + "/v1/loads", timeout)
    if status == 200 and isinstance(body, dict) and isinstance(body.get("loads"), list):
        return (
            sum(int(r.get("num_running_reqs", 0)) + int(r.get("num_waiting_reqs", 0)) for r in body["loads"]),
            "/v1/loads",
            "",
        )
    if status == 404:
        status, body = _get(base_url + "/get_load", timeout)
        if status == 200 and isinstance(body, list):
            return sum(int(r.get("num_reqs", 0)) for r in body), "/get_load", ""
        return -1, "/get_load", f"HTTP {status}: {body}" if status else str(body)
    return -1, "/v1/loads", f"HTTP {status}" if status else str(body)


def main():
    module = AnsibleModule(
        argument_spec={
            "base_url": {"type": "str", "required": True},
            "timeout": {"type": "float", "default": 300.0},
            "poll_interval": {"type": "float", "default": 1.0},
        },
        supports_check_mode=True,
    )
    params = module.params
    base = params["base_url"].rstrip("/")
    start = time.monotonic()
    deadline = start + params["timeout"]
    while True:
        count, endpoint, error = in_flight(base, max(0.5, min(REQUEST_TIMEOUT_S, deadline - time.monotonic())))
        left = deadline - time.monotonic()
        if count == 0 or left <= 0:
            break
        # the last poll comes at the deadline, not one interval before it
        time.sleep(min(params["poll_interval"], left))
    module.exit_json(
        changed=False,
        drained=count == 0,
        in_flight=count,
        endpoint=endpoint,
        error=error,
        waited_s=round(time.monotonic() - start, 1),
    )


if __name__ == "__main__":
    main()
