"""What is behind a URL: is it SGLang, is it healthy, which model, is speculation on.

Reads 0.5.19's `/server_info` (falling back to the deprecated `/get_server_info`): the flat server
arguments (`model_path`, `served_model_name`, `speculative_algorithm`, `speculative_num_draft_tokens`,
`enable_linear_replayssm_spec`, `mamba_ssm_dtype`, the `linear_attn_*backend` flags),
`internal_states[].avg_spec_accept_length` and `version`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from replayssm_overlay.verify_kernel import FLAGS

from . import httpclient
from .errors import SmokeEnvironmentError

# The server arguments that pick the row of the overlay's exactness table (`replayssm_overlay.exactness`).
EXACTNESS_ARGUMENTS = ("mamba_ssm_dtype", *FLAGS)
# Keys every 0.5.19 /server_info carries; a JSON answer without them is some other service.
SGLANG_KEYS = ("model_path", "internal_states", "version")


@dataclass(frozen=True)
class ServerInfo:
    url: str
    model_path: str
    served_model_name: str
    version: str
    speculative_algorithm: str | None
    speculative_num_draft_tokens: int | None
    replayssm_spec: bool | None
    raw: dict

    @property
    def names(self) -> list[str]:
        return [self.model_path, self.served_model_name, self.model_path.rstrip("/").rsplit("/", 1)[-1]]

    def avg_spec_accept_length(self) -> float | None:
        """Cumulative since boot (scheduler.py); absent before the first speculative forward."""
        values = [s.get("avg_spec_accept_length") for s in self.raw.get("internal_states") or [] if isinstance(s, dict)]
        values = [v for v in values if isinstance(v, (int, float))]
        return sum(values) / len(values) if values else None

    def summary(self) -> dict:
        """What parity's mode is chosen from (`parity_mode.py`), as the server reports it."""
        return {
            "url": self.url,
            "model_path": self.model_path,
            "served_model_name": self.served_model_name,
            "sglang_version": self.version,
            "speculative_algorithm": self.speculative_algorithm,
            "speculative_num_draft_tokens": self.speculative_num_draft_tokens,
            "enable_linear_replayssm_spec": self.replayssm_spec,
            **{name: self.raw.get(name) for name in EXACTNESS_ARGUMENTS},
        }


def normalize_url(url: str) -> str:
    if not url.startswith(("http://", "https://")):
        raise SmokeEnvironmentError(f"not an http(s) URL: {url!r}", "give the server as http://HOST:PORT")
    return url.rstrip("/")


def wait_healthy(url: str, wait_s: float, timeout: float, progress) -> None:
    """GET /health until 200, for at most wait_s seconds (once when wait_s is 0)."""
    deadline = time.monotonic() + wait_s
    while True:
        status = httpclient.get_status(url + "/health", timeout)
        if status == 200:
            return
        if status == 404:
            raise SmokeEnvironmentError(
                f"{url} has no /health endpoint: not an SGLang server",
                "point the URL at the SGLang HTTP port (python -m sglang.launch_server --port)",
            )
        if time.monotonic() >= deadline:
            if status == 0:
                raise SmokeEnvironmentError(
                    f"cannot reach {url}/health",
                    "check the URL and that the server is up; --wait S waits for a starting server",
                )
            raise SmokeEnvironmentError(
                f"{url}/health answered {status}: the server is not healthy",
                "wait for it to finish starting (--wait S) or check its logs",
            )
        progress(f"waiting for {url}/health (answered {status or 'nothing'})")
        time.sleep(min(0.5, max(0.05, deadline - time.monotonic())))


def probe(url: str, timeout: float) -> ServerInfo:
    info = None
    for path in ("/server_info", "/get_server_info"):
        try:
            info = httpclient.get_json(url + path, timeout)
            break
        except httpclient.HttpStatusError as exc:
            if exc.status != 404:
                raise
    if not isinstance(info, dict) or not all(k in info for k in SGLANG_KEYS):
        raise SmokeEnvironmentError(
            f"{url} has no SGLang /server_info (expected keys {list(SGLANG_KEYS)}): not an SGLang server",
            "point the URL at the SGLang HTTP port (python -m sglang.launch_server --port)",
        )
    draft = info.get("speculative_num_draft_tokens")
    return ServerInfo(
        url=url,
        model_path=str(info.get("model_path")),
        served_model_name=str(info.get("served_model_name") or info.get("model_path")),
        version=str(info.get("version")),
        speculative_algorithm=info.get("speculative_algorithm") or None,
        speculative_num_draft_tokens=draft if isinstance(draft, int) else None,
        replayssm_spec=info.get("enable_linear_replayssm_spec"),
        raw=info,
    )


def require_speculative(info: ServerInfo) -> None:
    if not info.speculative_algorithm:
        raise SmokeEnvironmentError(
            f"{info.url} serves {info.model_path} without speculative decoding (speculative_algorithm is null)",
            "start it with --speculative-algorithm DFLASH|DSPARK (and --enable-linear-replayssm-spec), "
            "or use this URL as --reference",
        )
