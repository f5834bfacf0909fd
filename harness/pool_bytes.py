"""The bytes SGLang's own pool builder allocates for a real model's mamba pool, per request slot (harness only).

`replayssm-overlay plan` computes the speculative state per running request without SGLang or torch (a
controller has neither), from `replayssm_overlay.plan.state_bytes`. This module is what that arithmetic is
held to (tests/plan): it publishes the flags, builds the installed release's real
`KVCacheConfigurator._build_hybrid_req_pool` for the model's real SGLang config class on the CPU (CUDA
buffers redirected, `cpu_redirects`), at a few slots, and reads every tensor the `MambaPool` holds. Two pools
that differ by one mamba slot, and two that differ by one running-request slot, give the bytes of each slot
kind by buffer; full-size pools are never built, so a case takes milliseconds after the import. The pool is
built with `--speculative-algorithm EAGLE` (`BUILD_ALGORITHM`): stock SGLang refuses DFLASH/DSPARK with
ReplaySSM on a GDN model before it builds anything (the refusal the overlay lifts), and the builder passes
the pool only the draft-token count and top-k of the speculative config, never the algorithm's name. Run it in a
process that imports the release to measure (PYTHONPATH=<release folder>:overlay:.):

    python -m harness.pool_bytes CASES.json   # a JSON list of `case` dicts; prints a JSON list of results
"""

import contextlib
import dataclasses
import json
import os
import sys

#: model_type of the config.json (its text part) -> SGLang's config class for it
BUILD_ALGORITHM = "EAGLE"
CONFIG_CLASSES = {"qwen3_next": "Qwen3NextConfig", "qwen3_5": "Qwen3_5Config", "qwen3_5_moe": "Qwen3_5MoeConfig"}


def hf_config(config_json: dict):
    """The SGLang config object a server builds from this config.json."""
    from sglang.srt import configs

    return getattr(configs, CONFIG_CLASSES[config_json["model_type"]])(**config_json)


@contextlib.contextmanager
def _ssm_dtype(name):
    """`--mamba-ssm-dtype` as SGLang's server applies it: the SGLANG_MAMBA_SSM_DTYPE variable."""
    previous = os.environ.get("SGLANG_MAMBA_SSM_DTYPE")
    if name is not None:
        os.environ["SGLANG_MAMBA_SSM_DTYPE"] = name
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("SGLANG_MAMBA_SSM_DTYPE", None)
        else:
            os.environ["SGLANG_MAMBA_SSM_DTYPE"] = previous


def _tensors(value, name: str):
    """(name, tensor) for every tensor reachable from a pool attribute (dataclasses, lists, tuples)."""
    import torch

    if isinstance(value, torch.Tensor):
        yield name, value
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            yield from _tensors(getattr(value, field.name), field.name)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from _tensors(item, f"{name}[{index}]")


def buffer_bytes(mamba_pool) -> dict:
    """{buffer name: bytes} over the pool's distinct storages (a view is counted once, under the first name)."""
    seen, sizes = set(), {}
    for attribute, value in sorted(vars(mamba_pool).items()):
        for name, tensor in _tensors(value, attribute):
            storage = tensor.untyped_storage()
            if storage.data_ptr() in seen or storage.nbytes() == 0:
                continue
            seen.add(storage.data_ptr())
            sizes[name] = sizes.get(name, 0) + storage.nbytes()
    return sizes


def build(case: dict, *, mamba_slots: int, request_slots: int) -> dict:
    """The mamba pool's buffers as the release's own builder allocates them for `case`."""
    from harness.configurator_probe import build_configurator
    from harness.context import published
    from harness.cpu_redirects import cuda_zeros_to_cpu

    with open(case["config"]) as handle:
        config_json = json.load(handle)
    spec = {"speculative_num_draft_tokens": case["window"], "speculative_eagle_topk": 1}
    with (
        _ssm_dtype(case.get("mamba_ssm_dtype")),
        published(
            BUILD_ALGORITHM,
            replayssm_spec=case["replayssm"],
            attn_tp_size=case["attn_tp"],
            max_mamba_cache_size=mamba_slots,
            linear_replayssm_cache_len=case["ring_len"],
            disaggregation_mode="null",
            **spec,
        ),
    ):
        config = hf_config(config_json)
        layers = config.get_text_config().num_hidden_layers
        configurator = build_configurator(config, layers=layers)
        with cuda_zeros_to_cpu():
            pool = configurator._build_hybrid_req_pool(max_num_reqs=request_slots, extra_max_context_len=0)
    return buffer_bytes(pool.mamba_pool)


def _difference(more: dict, base: dict) -> dict:
    return {
        name: more.get(name, 0) - base.get(name, 0)
        for name in sorted(set(more) | set(base))
        if more.get(name, 0) != base.get(name, 0)
    }


def measure(case: dict) -> dict:
    """{"slot": {buffer: bytes}, "request": {buffer: bytes}, "fixed": {buffer: bytes}}: what one more mamba
    slot, one more running-request slot and no slot at all (the builder's +1 padding row aside) cost."""
    base = build(case, mamba_slots=1, request_slots=1)
    slot = _difference(build(case, mamba_slots=2, request_slots=1), base)
    request = _difference(build(case, mamba_slots=1, request_slots=2), base)
    fixed = {name: size - 2 * slot.get(name, 0) - 2 * request.get(name, 0) for name, size in base.items()}
    return {"case": case, "slot": slot, "request": request, "fixed": {k: v for k, v in fixed.items() if v}}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    with open(argv[0]) as handle:
        cases = json.load(handle)
    from harness import on_cpu

    on_cpu.prepare()
    json.dump([measure(case) for case in cases], sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
