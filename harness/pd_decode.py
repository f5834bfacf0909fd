"""The verify -> commit cycle on the request pool of a PD-disaggregation decode server (harness only).

A `--disaggregation-mode decode` server builds its request pool with
`KVCacheConfigurator._build_hybrid_mamba_decode_req_pool` (a `HybridMambaDecodeReqToTokenPool`: the
decode-side row allocator, the same `_init_mamba_pool`). `decode_pool_builder` builds that pool through the
installed SGLang's real configurator for the cycle's tiny GDN model, so the cycles of `harness.cycle`
(0.5.19: bitwise against token-by-token decode) and `harness.ring_cycle` (0.5.20 on: bitwise against that
release's MTP commit after every step) run on it unchanged. In a process that imported the patched copy,
the builder asks the overlay's `refuse_unserved_pool` first, as a server's would: a refusal is the
result.
"""

import contextlib
import os

from harness.configurator_probe import build_configurator, hf_config
from harness.context import published
from harness.cpu_redirects import cuda_zeros_to_cpu

CONV_DTYPE_VARIABLE = "SGLANG_MAMBA_CONV_DTYPE"  # the conv (and ReplaySSM ring) dtype SGLang's configs read


@contextlib.contextmanager
def _conv_dtype(dtype):
    """SGLang's config classes read the conv dtype from the environment; the harness model's is fp32."""
    previous = os.environ.get(CONV_DTYPE_VARIABLE)
    os.environ[CONV_DTYPE_VARIABLE] = str(dtype).replace("torch.", "")
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(CONV_DTYPE_VARIABLE, None)
        else:
            os.environ[CONV_DTYPE_VARIABLE] = previous


def decode_pool_builder(algorithm: str):
    """A `build_pool`-compatible builder (`model, *, slots, draft_tokens, ring_len`) of the PD-decode pool,
    made by the configurator under a published `--disaggregation-mode decode` config for `algorithm`."""

    def build(model, *, slots: int, draft_tokens: int, ring_len: int = 16):
        with (
            _conv_dtype(model.conv_dtype),
            published(
                algorithm,
                max_mamba_cache_size=slots,
                speculative_num_draft_tokens=draft_tokens,
                speculative_eagle_topk=1,
                disaggregation_mode="decode",
                linear_replayssm_cache_len=ring_len,
            ),
        ):
            configurator = build_configurator(hf_config("qwen3-next", model))
            with cuda_zeros_to_cpu():
                return configurator._build_hybrid_mamba_decode_req_pool(
                    max_num_reqs=slots, extra_max_context_len=0, pre_alloc_size=0
                )

    return build


#: the cycle scenarios run on the PD-decode pool: track slots for both algorithms, padded rows (0.5.19);
#: a ring that flushes every step and the track crossings (0.5.20 on; windows that fit the ring: ring_fit)
FOLD_SCENARIOS = (("padded rows", "DFLASH"), ("track crossing", "DFLASH"), ("track crossing", "DSPARK"))
RING_SCENARIOS = (("flush every commit (L = N)", "DFLASH"), ("track crossing", "DFLASH"), ("track crossing", "DSPARK"))


def run_pd_decode_cycles(protocol: str, commit_for, *, model=None, seed: int = 0, first_only: bool = False) -> list:
    """The chosen scenarios (`first_only`: the first per algorithm) on the PD-decode pool, committed with
    `commit_for(algorithm)`, for `model` (None: the cycle's default); a builder that refuses is a result
    (`error`), not a failure."""
    from harness import cycle, ring_cycle

    ring = protocol == "ring"
    known = {(s.name, s.algorithm): s for s in (ring_cycle.RING_SCENARIOS if ring else cycle.SCENARIOS)}
    chosen = [known[key] for key in (RING_SCENARIOS if ring else FOLD_SCENARIOS)]
    if first_only:
        chosen = [next(s for s in chosen if s.algorithm == a) for a in ("DFLASH", "DSPARK")]
    run = ring_cycle.run_ring_cycle if ring else cycle.run_cycle
    results = []
    for scenario in chosen:
        try:
            result = run(
                scenario,
                commit_for(scenario.algorithm),
                seed=seed,
                pool_builder=decode_pool_builder(scenario.algorithm),
                **({} if model is None else {"model": model}),
            ).to_dict()
        except Exception as error:  # the builder refused (a patched SGLang's startup rule)
            result = {
                "scenario": scenario.name,
                "algorithm": scenario.algorithm,
                "refused": True,
                "error": f"{type(error).__name__}: {error}",
            }
        results.append(result)
    return results
