"""Errors that end a smoke run with exit code 2 (usage or environment), never with a verdict.

Each carries what is wrong and how to fix it (`what`, `fix`: an `OverlayError`, the root of every error
the project raises on purpose), so the CLI can print one clear message.
"""

from __future__ import annotations

from replayssm_overlay.cliutil import EXIT_USAGE
from replayssm_overlay.errors import OverlayError


class SmokeEnvironmentError(OverlayError):
    """A usage or environment problem: bad input file, unreachable or non-SGLang server, bad response."""

    code = "smoke-environment"
    exit_code = EXIT_USAGE
