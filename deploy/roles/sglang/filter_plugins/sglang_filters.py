"""Filters of the sglang_* roles: SGLang flags from the inventory's mapping, status table lines (what runs,
and what it serves with: fold, self-check, last periodic smoke) and the status verdict (exit code 0 or 1).

Why a filter and not Jinja: the mapping form (`name: true` -> `--name`, `name: value` -> `--name value`,
`false`/null -> dropped) is what the preflight checks and what operators read; rendering it in a
template would need mutation inside Jinja, which ansible-core 2.19 templating does not guarantee.
"""

import difflib
from pathlib import Path
from urllib.parse import urlsplit

import yaml
from ansible.errors import AnsibleFilterError

# sglang_* variables the playbooks themselves read or set (not in any role's defaults)
PLAYBOOK_VARIABLES = ("sglang_hosts", "sglang_rollout_serial", "sglang_run_id")


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


def sglang_unknown_variables(names, roles_dir):
    """`name (did you mean X?)` for each sglang_* name in `names` that no role's defaults/main.yml under
    `roles_dir` declares (nor the playbooks read): a misspelled variable silently keeps the default."""
    known = set(PLAYBOOK_VARIABLES)
    for defaults in sorted(Path(roles_dir).glob("*/defaults/main.yml")):
        known.update((yaml.safe_load(defaults.read_text()) or {}).keys())
    if len(known) == len(PLAYBOOK_VARIABLES):
        raise AnsibleFilterError(f"no role defaults found under {roles_dir}; the deploy tree is incomplete")
    unknown = []
    for name in sorted(str(n) for n in names if str(n).startswith("sglang_") and str(n) not in known):
        close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.8)
        unknown.append(f"{name} (did you mean {close[0]}?)" if close else name)
    return unknown


def sglang_image_name(ref):
    """A short name an operator can read for an image reference: repo:tag as it is, repo@sha256:<12 hex>
    for a digest, 12 hex for a bare image ID; "" and None stay "nothing"."""
    ref = str(ref or "").strip()
    if not ref or ref == "nothing":
        return "nothing"
    if "@sha256:" in ref:
        repo, digest = ref.split("@sha256:", 1)
        return f"{repo}@sha256:{digest[:12]}"
    if ref.startswith("sha256:") or (len(ref) == 64 and all(c in "0123456789abcdef" for c in ref)):
        return ref.replace("sha256:", "")[:12]
    return ref


STATUS_FORMAT = "%-18s %-16s %-6s %-7s %-7s %-6s %-12s %-20s %s"
STATUS_HEADER = ("HOST", "SERVICE", "PORT", "RUNNING", "HEALTHY", "ROUTED", "IMAGE ID", "DEPLOYED", "PREVIOUS")


def sglang_status_table(rows):
    """The status table (header + one line per node, a node with notes marked `*`) and the notes below it,
    as one string: printed as a block, never re-wrapped, the table under 120 columns for host and service
    names of up to 16 characters."""
    notes = [f"* {row.get('host', '?')}: {note}" for row in rows for note in row.get("notes") or []]
    return "\n".join([STATUS_FORMAT % STATUS_HEADER] + [sglang_status_line(row) for row in rows] + notes)


def sglang_status_line(row):
    """Return one table line for a node's status row (see roles/sglang_status); "?" where it could not be read."""

    def short(image_id):
        return (image_id or "-").replace("sha256:", "")[:12] or "-"

    def yes(value):
        return "?" if value is None else "yes" if str(value).lower() == "true" else "no"

    return STATUS_FORMAT % (
        row.get("host", "?") + (" *" if row.get("notes") else ""),
        row.get("service", "?"),
        row.get("port", "?"),
        yes(row.get("running")),
        yes(row.get("healthy")),
        row.get("routed") or "-",
        short(row.get("image_id")),
        row.get("deployed_at") or "-",
        short(row.get("previous_image_id")),
    )


def sglang_status_flags(row):
    """Why a node's status row is not "serving and routed" ([] when it is): what make fleet-status's exit
    code 1 stands for."""
    flags = list(row.get("notes") or [])
    if row.get("reachable") is not False and not flags:
        flags += [
            what
            for key, what in (
                ("running", "its container does not run"),
                ("healthy", "it does not answer /health with 200"),
            )
            if not row.get(key)
        ]
    if row.get("routed") in ("no", "ill"):
        flags.append("the router does not route to it" if row["routed"] == "no" else "the router lists it as unhealthy")
    return flags


def sglang_status_verdict(rows, foreign=None):
    """make fleet-status's verdict: exit_code 0 (every node serving and routed) or 1 (something flagged,
    listed as "host: why"), and the workers the routers list that are not the inventory's (`foreign`, shown,
    not flagged: a router may serve other fleets too). Exit code 2, could not run, is the caller's."""
    flagged = [f"{row.get('host', '?')}: {flag}" for row in rows for flag in sglang_status_flags(row)]
    lines = [
        f"* router {w['router']} also routes to {w['url']} ({'healthy' if w.get('is_healthy') else 'unhealthy'}): "
        f"not ours, no node of the inventory has that URL"
        for w in foreign or []
    ]
    code = 1 if flagged else 0
    lines.append(
        f"fleet-status: {code}, "
        + (
            f"{len(flagged)} thing(s) flagged on {', '.join(sorted({f.split(':', 1)[0] for f in flagged}))}"
            if flagged
            else "every node serving and routed"
        )
    )
    return {"exit_code": code, "flagged": flagged, "foreign_workers": list(foreign or []), "text": "\n".join(lines)}


def sglang_foreign_workers(listings, ours, our_addresses):
    """The workers each router lists (`listings`: router -> [{url, is_healthy}]) that are no node of the
    inventory: neither one of `ours` (the nodes' worker URLs) nor at one of `our_addresses` (the hosts of
    inventory nodes this run did not select, whose exact worker URL it does not know)."""
    ours = {str(u).rstrip("/") for u in ours}
    addresses = {str(a) for a in our_addresses}
    return [
        {"router": router, "url": w["url"], "is_healthy": bool(w.get("is_healthy"))}
        for router, workers in sorted((listings or {}).items())
        for w in workers or []
        if w["url"].rstrip("/") not in ours and urlsplit(w["url"]).hostname not in addresses
    ]


WATCH_FORMAT = "%-16s %-16s %-17s %-24s %-9s %s"
WATCH_HEADER = ("HOST", "SERVICE", "FOLD", "SELF-CHECK", "FALLBACKS", "LAST SMOKE")


def sglang_smoke_summary(report):
    """What `make fleet-status` keeps of a periodic smoke's report.json: when, the outcome, the failed gates."""
    return {
        "started_at": report.get("started_at"),
        "passed": report.get("passed"),
        "exit_code": report.get("exit_code"),
        "duration_s": report.get("duration_s"),
        "failed_gates": [g.get("name") for g in report.get("gates") or [] if g.get("passed") is False],
        "error": (report.get("error") or {}).get("what"),
    }


def sglang_bake_summary(report):
    """What `make fleet-status` keeps of a node's last canary bake (<state dir>/bake/<name>.json): the
    verdict, its headline, where the numbers came from, and `line`, the headline with that source."""
    kept = {k: report.get(k) for k in ("verdict", "headline", "ended_at", "run_id", "image", "failed_rows", "source")}
    source = kept["source"]
    kept["line"] = f"{kept['headline']} (numbers from {source})" if source else kept["headline"]
    return kept


def sglang_watch_table(rows):
    """The second status table: per node, the fold its serving processes commit with, their self-check
    outcomes, the commit shapes that fell back to SGLang's fold, and the last periodic smoke. "-" where the
    container does not run or its overlay cannot say; "never" where no periodic smoke has written a report."""
    return "\n".join([WATCH_FORMAT % WATCH_HEADER] + [sglang_watch_line(row) for row in rows])


def sglang_watch_line(row):
    """Return one line of the second status table for a node's status row."""
    overlay = row.get("overlay") or {}
    outcomes = overlay.get("selfcheck_outcomes") or {}
    smoke = row.get("last_smoke")
    if smoke:
        verdict = {0: "pass", 1: "FAIL"}.get(smoke.get("exit_code"), "ERROR")
        last = f"{verdict} {smoke.get('started_at') or '?'}"
    else:
        last = "never"
    return WATCH_FORMAT % (
        row.get("host", "?"),
        row.get("service", "?"),
        ",".join(overlay.get("fold_in_use") or []) or "-",
        ", ".join(f"{k} x{v}" for k, v in sorted(outcomes.items())) or ("none" if overlay else "-"),
        len(overlay.get("fallback_shapes") or []) if overlay else "-",
        last,
    )


class FilterModule:
    """Filters for the sglang_* roles."""

    def filters(self):
        return {
            "sglang_flag_args": sglang_flag_args,
            "sglang_flag_names": sglang_flag_names,
            "sglang_image_name": sglang_image_name,
            "sglang_unknown_variables": sglang_unknown_variables,
            "sglang_status_table": sglang_status_table,
            "sglang_status_verdict": sglang_status_verdict,
            "sglang_foreign_workers": sglang_foreign_workers,
            "sglang_smoke_summary": sglang_smoke_summary,
            "sglang_bake_summary": sglang_bake_summary,
            "sglang_watch_table": sglang_watch_table,
        }
