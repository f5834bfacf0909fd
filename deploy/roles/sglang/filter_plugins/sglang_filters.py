"""Filters of the sglang_* roles: SGLang flags from the inventory's mapping, status table lines.

Why a filter and not Jinja: the mapping form (`name: true` -> `--name`, `name: value` -> `--name value`,
`false`/null -> dropped) is what the preflight checks and what operators read; rendering it in a
template would need mutation inside Jinja, which ansible-core 2.19 templating does not guarantee.
"""

from ansible.errors import AnsibleFilterError


def sglang_flag_args(flags):
    """Return the argv list for a mapping of SGLang flags (names without the leading dashes)."""
    if flags is None:
        return []
    if not isinstance(flags, dict):
        raise AnsibleFilterError(
            "sglang_flags must be a mapping of flag name to value (e.g. {enable-linear-replayssm-spec: true}), "
            f"got {type(flags).__name__}"
        )
    args = []
    for name, value in flags.items():
        flag = "--" + str(name).lstrip("-")
        if value is True:
            args.append(flag)
        elif value is False or value is None:
            continue
        elif isinstance(value, (list, tuple)):
            args.append(flag)
            args.extend(str(item) for item in value)
        else:
            args.extend([flag, str(value)])
    return args


def sglang_flag_names(flags):
    """Return the normalised flag names that are switched on (value not false/null)."""
    return [str(name).lstrip("-") for name, value in (flags or {}).items() if value is not False and value is not None]


def sglang_status_line(row):
    """Return one table line for a node's status row (see roles/sglang_status)."""

    def short(image_id):
        return (image_id or "-").replace("sha256:", "")[:12] or "-"

    def yes(value):
        return "yes" if str(value).lower() == "true" else "no"

    return "%-16s %-16s %-6s %-8s %-8s %-19s %-20s %s" % (
        row.get("host", "?"),
        row.get("service", "?"),
        row.get("port", "?"),
        yes(row.get("running")),
        yes(row.get("healthy")),
        short(row.get("image_id")),
        row.get("deployed_at") or "-",
        short(row.get("previous_image_id")),
    )


class FilterModule:
    """Filters for the sglang_* roles."""

    def filters(self):
        return {
            "sglang_flag_args": sglang_flag_args,
            "sglang_flag_names": sglang_flag_names,
            "sglang_status_line": sglang_status_line,
        }
