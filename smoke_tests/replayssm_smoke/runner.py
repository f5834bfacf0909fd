"""Sending the workload: bounded concurrency, a timeout on every request, a deadline on the whole run.

Also validates each /generate answer against 0.5.19's shape (`output_ids`, `meta_info.completion_tokens`,
`prompt_token_ids` when asked for) so a malformed answer stops the run with exit 2 instead of being
scored.
"""

from __future__ import annotations

import time
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass

from . import httpclient
from .errors import SmokeEnvironmentError
from .prompts import Prompt


class Deadline:
    """The whole run's time budget; each request's timeout is cut to what is left."""

    def __init__(self, total_s: float, request_timeout_s: float) -> None:
        self.end = time.monotonic() + total_s
        self.total_s = total_s
        self.request_timeout_s = request_timeout_s

    def timeout(self) -> float:
        left = self.end - time.monotonic()
        if left <= 0:
            raise self._expired()
        return min(self.request_timeout_s, left)

    def _expired(self) -> SmokeEnvironmentError:
        return SmokeEnvironmentError(
            f"the run exceeded its deadline of {self.total_s:g} s",
            "raise --deadline, lower --max-new-tokens, or use fewer prompts",
        )

    def post_json(self, url: str, payload: dict):
        """POST with the request timeout cut to the run's remaining time."""
        try:
            return httpclient.post_json(url, payload, self.timeout())
        except httpclient.RequestTimeout:
            if time.monotonic() >= self.end:
                raise self._expired() from None
            raise


@dataclass
class Generation:
    prompt: Prompt
    prompt_ids: list[int]
    output_ids: list[int]
    meta: dict
    wall_s: float

    @property
    def tokens_per_s(self) -> float | None:
        return len(self.output_ids) / self.wall_s if self.wall_s > 0 else None


def malformed(url: str, what: str) -> SmokeEnvironmentError:
    return SmokeEnvironmentError(
        f"malformed /generate response from {url}: {what}",
        "is this SGLang 0.5.19's native /generate? check the server's version and logs",
    )


def check_answer(url: str, answer, prompt_id: str) -> dict:
    """The answer's meta_info; an aborted request (finish_reason type "abort") is an environment error."""
    meta = answer.get("meta_info") if isinstance(answer, dict) else None
    if not isinstance(meta, dict):
        raise malformed(url, f"the answer for {prompt_id} has no meta_info object")
    reason = meta.get("finish_reason")
    if isinstance(reason, dict) and reason.get("type") == "abort":
        raise SmokeEnvironmentError(
            f"{url} aborted the request for {prompt_id}: {reason.get('message')}",
            "check the server log; the prompt may be too long for its context",
        )
    return meta


def _token_list(value) -> bool:
    return isinstance(value, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in value)


def generate(url: str, prompt: Prompt, deadline: Deadline) -> Generation:
    payload = {
        **prompt.request_input(),
        "sampling_params": {"temperature": 0.0, "max_new_tokens": prompt.max_new_tokens},
        "return_prompt_token_ids": True,
        "rid": f"replayssm-smoke-{prompt.id}-{time.time_ns()}",
    }
    tic = time.monotonic()
    out = deadline.post_json(url + "/generate", payload)
    wall = time.monotonic() - tic
    if not isinstance(out, dict):
        raise malformed(url, f"expected a JSON object, got {type(out).__name__}")
    meta = check_answer(url, out, prompt.id)
    if not isinstance(meta.get("completion_tokens"), int):
        raise malformed(url, "no meta_info.completion_tokens")
    if not _token_list(out.get("output_ids")):
        raise malformed(url, "no output_ids list")
    prompt_ids = out.get("prompt_token_ids")
    if prompt_ids is None and prompt.input_ids is not None:
        prompt_ids = list(prompt.input_ids)
    if not _token_list(prompt_ids) or not prompt_ids:
        raise malformed(url, "no prompt_token_ids although return_prompt_token_ids was set")
    if meta["completion_tokens"] != len(out["output_ids"]):
        raise malformed(
            url, f"completion_tokens {meta['completion_tokens']} != len(output_ids) {len(out['output_ids'])}"
        )
    return Generation(prompt, prompt_ids, out["output_ids"], meta, wall)


def run_all(items: list, fn, concurrency: int, progress, label: str) -> list:
    """fn(item) for every item with at most `concurrency` in flight; results in input order.

    The first exception cancels what has not started and is re-raised: a run is never half scored.
    """
    results: list = [None] * len(items)
    done_count = 0
    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        futures = {pool.submit(fn, item): i for i, item in enumerate(items)}
        pending = set(futures)
        try:
            while pending:
                done, pending = wait(pending, return_when=FIRST_EXCEPTION)
                for fut in sorted(done, key=futures.get):
                    results[futures[fut]] = fut.result()
                    done_count += 1
                    progress(f"{label} {done_count}/{len(items)} {_describe(results[futures[fut]])}")
        except BaseException:
            for fut in pending:
                fut.cancel()
            raise
    return results


def _describe(result) -> str:
    describe = getattr(result, "describe", None)
    if callable(describe):
        return describe()
    if isinstance(result, Generation):
        spec = result.meta.get("spec_accept_length")
        accept = f" accept {spec:.2f}" if isinstance(spec, (int, float)) else ""
        return f"{result.prompt.id}: {len(result.output_ids)} tokens in {result.wall_s:.2f} s{accept}"
    return ""
