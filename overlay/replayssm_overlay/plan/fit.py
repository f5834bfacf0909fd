"""How many running requests a GPU's mamba pool holds, from its memory, the weights and SGLang's memory split.

SGLang's static budget for the caches is what `--mem-fraction-static` leaves after the weights: roughly
GPU memory x mem-fraction-static - the weights on that GPU (the CUDA context, activations and graphs come
out of the rest; this arithmetic leaves them out, so it is an upper bound). It gives the mamba pool
`--mamba-full-memory-ratio` r / (1 + r) of that (r = 0.9 by default) and keeps, per running request, a
number of state slots that its radix cache needs (`_calculate_mamba_ratio`: 3, plus 2 for `extra_buffer`
or 1 for `extra_buffer_lazy` with the overlap schedule on, 1 with `--disable-radix-cache`). A request then
costs that many slots plus its verify buffers (`state_bytes.per_request`), at the bytes the pool builder
allocates (SGLang's own planner leaves the verify conv windows out, so it may admit slightly more).
The weights are split evenly over the TP ranks.
"""

from __future__ import annotations

import json
import math
import pathlib
from dataclasses import dataclass

from replayssm_overlay.plan.errors import PlanInputError

MAMBA_FULL_MEMORY_RATIO = 0.9  # SGLang's --mamba-full-memory-ratio default
BASE_SLOTS = 3  # SGLang's MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO
EXTRA_SLOTS = {"no_buffer": 0, "extra_buffer": 2, "extra_buffer_lazy": 1}  # with the overlap schedule on
GIB = 1 << 30


def slots_per_request(strategy: str, disable_radix_cache: bool) -> int:
    """State slots SGLang keeps per running request (its `_calculate_mamba_ratio`)."""
    return 1 if disable_radix_cache else BASE_SLOTS + EXTRA_SLOTS[strategy]


def weights_bytes(path) -> int:
    """Bytes of a checkpoint: a safetensors index (its metadata.total_size), or a folder (its index, else
    the sum of its *.safetensors files)."""
    path = pathlib.Path(path)
    if path.is_dir():
        indexes = sorted(path.glob("*.safetensors.index.json"))
        if indexes:
            return weights_bytes(indexes[0])
        files = sorted(path.glob("*.safetensors"))
        if not files:
            raise PlanInputError(
                f"{path} holds no *.safetensors file and no *.safetensors.index.json",
                "pass the model folder with its weights, its safetensors index, or --weights-gib",
            )
        return sum(file.stat().st_size for file in files)
    try:
        total = json.loads(path.read_text()).get("metadata", {}).get("total_size")
    except OSError as error:
        raise PlanInputError(
            f"cannot read {path}: {error.strerror or error}",
            "pass the model folder, its safetensors index, or --weights-gib",
        ) from error
    except (ValueError, AttributeError) as error:
        raise PlanInputError(
            f"{path} is not a safetensors index (JSON with metadata.total_size)",
            "pass the model folder, its *.safetensors.index.json, or --weights-gib",
        ) from error
    if not isinstance(total, int) or total <= 0:
        raise PlanInputError(
            f"{path}: metadata.total_size is {total!r}, not a positive byte count",
            "pass the model folder, its *.safetensors.index.json, or --weights-gib",
        )
    return total


@dataclass(frozen=True)
class Budget:
    """One GPU's bytes for the caches, and the mamba pool's share of them."""

    gpu_memory_bytes: int
    weights_bytes_per_gpu: int
    mem_fraction_static: float
    mamba_full_memory_ratio: float = MAMBA_FULL_MEMORY_RATIO

    @property
    def static_bytes(self) -> int:
        return int(self.gpu_memory_bytes * self.mem_fraction_static) - self.weights_bytes_per_gpu

    @property
    def mamba_bytes(self) -> int:
        ratio = self.mamba_full_memory_ratio
        return max(0, int(self.static_bytes * ratio / (1 + ratio)))

    def check(self) -> None:
        if self.static_bytes <= 0:
            needed = self.weights_bytes_per_gpu / self.gpu_memory_bytes
            raise PlanInputError(
                f"the weights ({self.weights_bytes_per_gpu / GIB:.1f} GiB per GPU) leave nothing of "
                f"{self.gpu_memory_bytes / GIB:.1f} GiB x --mem-fraction-static {self.mem_fraction_static}",
                f"raise --mem-fraction-static above {math.ceil(needed * 1000) / 1000:.3f}, or use more TP ranks",
            )

    def requests(self, request_bytes: int) -> int:
        """Running requests whose state and verify buffers fit the mamba pool."""
        return self.mamba_bytes // request_bytes

    def describe(self) -> dict:
        return {
            "gpu_memory_gib": round(self.gpu_memory_bytes / GIB, 3),
            "weights_gib_per_gpu": round(self.weights_bytes_per_gpu / GIB, 3),
            "mem_fraction_static": self.mem_fraction_static,
            "mamba_full_memory_ratio": self.mamba_full_memory_ratio,
            "mamba_pool_bytes": self.mamba_bytes,
        }
