"""The entry points that the patched SGLang files call (the hook ABI).

The contract (who calls each function, its arguments, what its answer means, the marked lines that call
it) is written once, in `README.md` beside this file. Kept import-light: SGLang imports this module when
it imports a patched file; the implementations import torch, triton and sglang lazily.

An implementation module that fails to import answers as stock SGLang would (keep the KDA-only refusal,
refuse nothing more, commit nothing), and the failure is logged once: the overlay never takes down a
server because of itself.
"""

import importlib
import logging

_logger = logging.getLogger("replayssm_overlay.hooks")
_loaded = {}  # implementation module name -> the module, or None once it failed to import (logged once)


def _implementation(name: str):
    """`replayssm_overlay.hooks.<name>`, or None (logged once) if it fails to import."""
    if name in _loaded:
        return _loaded[name]
    try:
        module = _loaded[name] = importlib.import_module(f"replayssm_overlay.hooks.{name}")
        return module
    except Exception as err:
        _loaded[name] = None
        _logger.error(
            "replayssm-overlay: replayssm_overlay.hooks.%s is not importable (%r), so SGLang's own code runs "
            "there (DFLASH/DSPARK with --enable-linear-replayssm-spec on GDN models is refused as in stock "
            "SGLang); fix: reinstall the replayssm-overlay wheel into this Python",
            name,
            err,
        )
        return None


def keep_kda_only_guard(configurator) -> bool:
    """False lifts stock SGLang's KDA-only refusal, True keeps it (README.md)."""
    impl = _implementation("configurator")
    return True if impl is None else impl.keep_kda_only_guard(configurator)


def refuse_unserved_pool(configurator, builder: str) -> None:
    """Raises OverlayError for a combination the overlay does not serve on this pool builder (README.md)."""
    impl = _implementation("unserved_pools")
    if impl is not None:
        impl.refuse_unserved_pool(configurator, builder)


def dflash_commit(worker, batch, seq_lens_pre_verify, commit_lens, seq_lens_post_verify=None) -> bool:
    """True: the overlay committed DFLASH's accepted prefix; False: SGLang's body runs (README.md).
    `seq_lens_post_verify` is passed by the releases whose method has it (0.5.20 on)."""
    impl = _implementation("commit")
    return impl is not None and impl.dflash_commit(
        worker, batch, seq_lens_pre_verify, commit_lens, seq_lens_post_verify
    )


def dspark_commit(worker, batch, seq_lens_pre_verify, seq_lens_post_verify, commit_lens) -> bool:
    """True: the overlay committed DSPARK's accepted prefix; False: SGLang's body runs (README.md)."""
    impl = _implementation("commit")
    return impl is not None and impl.dspark_commit(
        worker, batch, seq_lens_pre_verify, seq_lens_post_verify, commit_lens
    )
