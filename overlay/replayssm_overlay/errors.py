"""The one exception type the overlay raises on purpose, so callers can tell a refusal from a bug.

Every refusal says three things: what is wrong, what was expected, and what to do about it. The command
line prints `str(error)` and exits 2; SGLang's startup shows it as the reason the server did not start.
"""


class OverlayError(Exception):
    """A clear, actionable refusal: `what` went wrong, `fix` says how to proceed."""

    def __init__(self, what: str, fix: str = ""):
        self.what = what
        self.fix = fix
        super().__init__(f"{what}\n  fix: {fix}" if fix else what)
