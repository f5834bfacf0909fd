"""Errors that end a smoke run with exit code 2 (usage or environment), never with a verdict.

Each carries what is wrong and how to fix it, so the CLI can print one clear message.
"""

from __future__ import annotations

from replayssm_overlay.cliutil import EXIT_USAGE


class SmokeEnvironmentError(Exception):
    """A usage or environment problem: bad input file, unreachable or non-SGLang server, bad response."""

    exit_code = EXIT_USAGE

    def __init__(self, what: str, fix: str = "") -> None:
        super().__init__(what)
        self.what = what
        self.fix = fix

    def __str__(self) -> str:
        return f"{self.what}\n  fix: {self.fix}" if self.fix else self.what
