#!/usr/bin/python
"""List the workers of a router, take one out of it or put one back, and wait until the router shows it.

Why a module: sglang-router 0.3.2 answers `POST /workers` and `DELETE /workers/{id}` with 202 and does the
work in a background job, so "removed" and "added" mean polling `GET /workers` until the URL is gone, or
listed and healthy; a `uri` task with `until` would print every poll and could not name the router's job
status on a timeout. Runs on the controller (the router is the operator's; the controller reaches it),
standard library only. Every request is bounded by what is left of `timeout`.

Two routers speak this API, told apart by their own answers (ROUTER_KINDS): sglang-router 0.3.2 (the SGLang
Model Gateway) and its successor smg 1.x (Shepherd Model Gateway). Facts it relies on (both checked against
their wheels, sglang-router 0.3.2 and smg 1.13.0): `GET /workers` answers `{"workers": [{"id", "url",
"is_healthy", "load", ...}], "total", ...}`, where smg's entries carry a `status` ("ready", "draining") that
0.3.2's lack; `DELETE /workers/{id}` answers 202 (404 `WORKER_NOT_FOUND` for an unknown ID); `POST /workers`
with `{"url": ...}` answers 202 with `worker_id`; `GET /workers/{id}` shows `job_status` while the job runs.
smg's removal marks the worker `draining` (no new requests, `is_healthy` false) and drops it from the list
only after its drain settle time (5 s, not waiting for the worker's requests): a draining worker counts as
out here, the node's own load (sglang_wait_drained) decides when its requests are done, and a worker still
draining is let go before it is added again.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: sglang_router_worker
short_description: List, remove or add a worker of an sglang-router and wait until the router shows it
description:
  - C(state=listed) reads the router's workers. C(state=absent) removes I(worker_url) and waits until the
    router no longer lists it. C(state=present) adds I(worker_url) and waits until the router lists it healthy.
options:
  router_url: {description: Base URL of the router (no path), type: str, required: true}
  worker_url: {description: The worker's URL as the router lists it (absent/present), type: str, default: ""}
  state: {description: listed, absent or present, type: str, default: listed, choices: [listed, absent, present]}
  timeout: {description: Seconds the router gets to show the change, type: float, default: 60}
  poll_interval: {description: Seconds between polls of GET /workers, type: float, default: 1}
  kind:
    description: The router the operator runs (auto = whatever its answers say); another kind than it answers as fails
    type: str
    default: auto
    choices: [auto, smg, sglang-router]
author: sglang-replayssm-overlay
"""

EXAMPLES = r"""
- name: Take the node out of the router
  sglang_router_worker:
    router_url: http://router.internal:30000
    worker_url: http://10.0.0.11:30000
    state: absent
  delegate_to: localhost
"""

RETURN = r"""
workers:
  description: "the router's workers after the change (url, id, is_healthy, load, status, priority)"
  type: list
  returned: always
kind: {description: "smg or sglang-router as the router's answers say (null for a router listing no worker)", type: str,
  returned: always}
worker: {description: the worker_url's entry, or null when the router does not list it, type: dict, returned: always}
waited_s: {description: seconds spent waiting for the router, type: float, returned: always}
"""

REQUEST_TIMEOUT_S = 10.0
ROUTER_KINDS = ("smg", "sglang-router")
DRAINING = "draining"  # smg 1.x: taken out, waiting its drain settle time, routed no new request


def router_kind(entries: list) -> str | None:
    """smg when the router's worker entries carry smg's `status`, sglang-router when they do not; None when it
    lists no worker (nothing to tell them apart by)."""
    if not entries:
        return None
    return "smg" if any(isinstance(w, dict) and "status" in w for w in entries) else "sglang-router"


class RouterError(Exception):
    """The router did not answer as the worker API of sglang-router or smg does; the message says what to fix.
    Not an `OverlayError`: Ansible ships each module to the node alone, where
    no overlay package can be imported; its stable `code` is unique with the overlay's all the same
    (`tests/structure/test_error_codes.py`)."""

    code = "router-refused"


def _norm(url: str) -> str:
    return url.strip().rstrip("/")


class Router:
    """The worker API of one router; every request ends by `deadline` (time.monotonic())."""

    def __init__(self, base: str, deadline: float, kind: str = "auto"):
        self.base = _norm(base)
        self.deadline = deadline
        self.expected = kind
        self.kind: str | None = None

    def _request(self, method: str, path: str, body: dict | None = None) -> tuple[int, object]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            self.base + path, data=data, method=method, headers={"Content-Type": "application/json"} if data else {}
        )
        timeout = max(1.0, min(REQUEST_TIMEOUT_S, self.deadline - time.monotonic()))
        try:
            with urllib.request.urlopen(req, timeout=timeout) as reply:
                status, raw = reply.status, reply.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
        except (OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise RouterError(
                f"the router at {self.base} does not answer {method} {path} ({reason}); check "
                f"sglang_router_url and that the router runs and is reachable from the controller"
            ) from exc
        try:
            return status, json.loads(raw or b"null")
        except ValueError:
            return status, raw[:200].decode(errors="replace")

    def workers(self) -> list[dict]:
        status, body = self._request("GET", "/workers")
        if status != 200 or not isinstance(body, dict) or not isinstance(body.get("workers"), list):
            raise RouterError(
                f"{self.base} answered GET /workers with HTTP {status} ({str(body)[:200]}), not "
                f"sglang-router's worker list; sglang_router_url must be the router's base URL "
                f"(scheme, host and port, no path), e.g. http://router:30000"
            )
        self._tell_kind(router_kind(body["workers"]))
        return [
            {
                "url": _norm(str(w.get("url", ""))),
                "id": w.get("id"),
                "is_healthy": bool(w.get("is_healthy")),
                "load": w.get("load"),
                "status": w.get("status"),
                "priority": w.get("priority"),
            }
            for w in body["workers"]
        ]

    def _tell_kind(self, kind: str | None) -> None:
        if kind is None:
            return
        if self.expected not in ("auto", kind):
            raise RouterError(
                f"the router at {self.base} answers as {kind}, not as "
                f"sglang_router_kind={self.expected}; set sglang_router_kind to {kind} (or auto), "
                f"or point sglang_router_url at the {self.expected} router"
            )
        self.kind = kind

    def find(self, worker_url: str) -> dict | None:
        return next((w for w in self.workers() if w["url"] == _norm(worker_url)), None)

    def remove(self, worker: dict) -> None:
        status, body = self._request("DELETE", f"/workers/{worker['id']}")
        if status not in (200, 202, 204, 404):
            raise RouterError(
                f"the router at {self.base} refused to remove {worker['url']}: DELETE "
                f"/workers/{worker['id']} answered HTTP {status} ({str(body)[:200]})"
            )

    def add(self, worker_url: str) -> str | None:
        status, body = self._request("POST", "/workers", {"url": _norm(worker_url)})
        if status not in (200, 201, 202):
            raise RouterError(
                f"the router at {self.base} refused to add {worker_url}: POST /workers answered "
                f"HTTP {status} ({str(body)[:200]})"
            )
        return body.get("worker_id") if isinstance(body, dict) else None

    def job(self, worker_id: str | None) -> str:
        """What the router says about a worker's background job, for a timeout message."""
        if not worker_id:
            return "no job ID was returned"
        try:
            _, body = self._request("GET", f"/workers/{worker_id}")
        except RouterError as exc:
            return str(exc)
        job = body.get("job_status") if isinstance(body, dict) else None
        if isinstance(job, dict):
            return f"its {job.get('job_type', 'job')} is {job.get('status')} ({job.get('message') or 'no message'})"
        return f"GET /workers/{worker_id} shows is_healthy={body.get('is_healthy') if isinstance(body, dict) else '?'}"


def _wait(router: Router, worker_url: str, done, poll: float) -> tuple[bool, dict | None]:
    """Poll until done(entry) is true or the deadline passes; return (done, last entry)."""
    while True:
        entry = router.find(worker_url)
        if done(entry):
            return True, entry
        if time.monotonic() + poll > router.deadline:
            return False, entry
        time.sleep(poll)


def _out(entry: dict | None) -> bool:
    """Routed no new request: not listed, or draining (smg)."""
    return entry is None or entry.get("status") == DRAINING


def run(params: dict) -> dict:
    """The module's work, without Ansible: raises RouterError with the message to fail with."""
    start = time.monotonic()
    router = Router(params["router_url"], start + params["timeout"], params.get("kind") or "auto")
    state, worker_url = params["state"], params["worker_url"]
    if state != "listed" and not worker_url:
        raise RouterError(f"state={state} needs worker_url")
    entry = router.find(worker_url) if worker_url else None
    changed = False
    if state == "absent" and not _out(entry):
        router.remove(entry)
        changed = True
        ok, entry = _wait(router, worker_url, _out, params["poll_interval"])
        if not ok:
            raise RouterError(
                f"the router at {router.base} still lists {worker_url} {params['timeout']:.0f} s after "
                f"DELETE /workers/{entry['id']}; {router.job(entry['id'])}"
            )
    elif state == "present" and not (entry and entry["is_healthy"]):
        if entry and entry.get("status") == DRAINING:  # smg removes it once settled; an add before is refused
            ok, entry = _wait(router, worker_url, lambda e: e is None, params["poll_interval"])
            if not ok:
                raise RouterError(
                    f"the router at {router.base} still lists {worker_url} as draining "
                    f"{params['timeout']:.0f} s after it was asked to add it back"
                )
        worker_id = entry["id"] if entry else router.add(worker_url)
        changed = entry is None
        ok, entry = _wait(router, worker_url, lambda e: bool(e and e["is_healthy"]), params["poll_interval"])
        if not ok:
            shown = "lists it as unhealthy" if entry else "does not list it"
            raise RouterError(
                f"the router at {router.base} {shown} {params['timeout']:.0f} s after it was asked to "
                f"add {worker_url}; {router.job(worker_id)}"
            )
    workers = router.workers()
    return {
        "changed": changed,
        "worker": entry,
        "workers": workers,
        "kind": router.kind,
        "waited_s": round(time.monotonic() - start, 1),
    }


def main():
    module = AnsibleModule(
        argument_spec={
            "router_url": {"type": "str", "required": True},
            "worker_url": {"type": "str", "default": ""},
            "state": {"type": "str", "default": "listed", "choices": ["listed", "absent", "present"]},
            "timeout": {"type": "float", "default": 60.0},
            "poll_interval": {"type": "float", "default": 1.0},
            "kind": {"type": "str", "default": "auto", "choices": ["auto", *ROUTER_KINDS]},
        },
        supports_check_mode=False,
    )
    try:
        module.exit_json(**run(module.params))
    except RouterError as exc:
        module.fail_json(msg=str(exc), code=exc.code, worker=None, workers=[], kind=None)


if __name__ == "__main__":
    main()
