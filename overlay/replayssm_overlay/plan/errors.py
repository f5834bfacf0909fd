"""The plan's one refusal: an input it cannot plan for, named with the field or flag and the fix (exit 2)."""

from replayssm_overlay.errors import OverlayError


class PlanInputError(OverlayError):
    """A config.json, flag or weights path the plan cannot use; nothing was computed or written."""

    code = "plan-bad-input"
