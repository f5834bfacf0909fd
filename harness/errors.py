"""The one error the harness raises on purpose: the environment cannot run the demo or a probe (no SGLang,
another release than the venv's, a release tree not installed, a probe that crashed).

An `OverlayError` (the root of every error the project raises on purpose), so `make demo` reports it as
an environment problem (exit 2) the way the overlay's own commands report theirs.
"""

from replayssm_overlay.errors import OverlayError


class HarnessError(OverlayError):
    """What is missing or failed, and what to run (`make setup`, a pip install) where there is a fix."""

    code = "demo-environment"
