"""Filters of the preflight's capacity plan: the `replayssm-overlay plan` arguments of one node's service, and
the one table of every service group's plan.

Why a filter: the plan's flags come from the inventory's SGLang flags mapping (names with or without dashes,
DFLASH's block size or DSPARK's gamma standing in for the draft-token count), which is Python's job, not
Jinja's; the numbers themselves come from `replayssm-overlay plan` (run on the controller).
"""

from ansible.errors import AnsibleFilterError

#: the plan's flags that are the SGLang flags of the same name, when the inventory sets them
PASSED_THROUGH = ("mamba-ssm-dtype", "mamba-full-memory-ratio", "mamba-radix-cache-strategy")
GIB = 1 << 30


def _flags(flags) -> dict:
    if not isinstance(flags, dict):
        raise AnsibleFilterError("sglang_flags must be a mapping")
    return {str(name).lstrip("-"): value for name, value in flags.items() if value is not False and value is not None}


def _window(flags: dict, algorithm: str):
    """The verify window N as the server derives it (None when the draft checkpoint decides it)."""
    if "speculative-num-draft-tokens" in flags:
        return int(flags["speculative-num-draft-tokens"])
    if algorithm == "DFLASH" and "speculative-dflash-block-size" in flags:
        return int(flags["speculative-dflash-block-size"])
    if algorithm == "DSPARK" and "speculative-dspark-block-size" in flags:
        return int(flags["speculative-dspark-block-size"]) + 1
    return None


def sglang_plan_setup(flags, algorithm, tp_size, release):
    """{"skip": why there is no plan ("" if there is one), "args": the plan's arguments but the model and
    the GPU, "fit": whether the pool must hold --max-running-requests (both it and --mem-fraction-static set)}."""
    flags, algorithm = _flags(flags), str(algorithm or "").upper()
    if algorithm not in ("DFLASH", "DSPARK") or "enable-linear-replayssm-spec" not in flags:
        return {"skip": "no DFLASH/DSPARK with --enable-linear-replayssm-spec", "args": [], "fit": False}
    if not release:
        return {
            "skip": "SGLang release unknown: set sglang_preflight_plan_release (or load the image on the node)",
            "args": [],
            "fit": False,
        }
    window = _window(flags, algorithm)
    if window is None:
        return {"skip": "no verify window in sglang_flags (speculative-num-draft-tokens)", "args": [], "fit": False}
    tp = int(tp_size)
    dp = int(flags.get("dp-size", flags.get("dp", 1))) if flags.get("enable-dp-attention") else 1
    args = [
        "--release",
        str(release),
        "--tp",
        str(tp),
        "--dp",
        str(dp),
        "--algorithm",
        algorithm,
        "--window",
        str(window),
        "--ring-len",
        str(flags.get("linear-replayssm-cache-len", 16)),
    ]
    for name in PASSED_THROUGH:
        if name in flags:
            args += [f"--{name}", str(flags[name])]
    if flags.get("disable-radix-cache") is True:
        args.append("--disable-radix-cache")
    fit = "max-running-requests" in flags and "mem-fraction-static" in flags
    if fit:
        args += [
            "--max-running-requests",
            str(flags["max-running-requests"]),
            "--mem-fraction-static",
            str(flags["mem-fraction-static"]),
        ]
    return {"skip": "", "args": args, "fit": fit}


def sglang_plan_fit_args(smi_lines, weight_sizes):
    """--gpu-memory-gib (the smallest GPU nvidia-smi lists, in MiB) and --weights-gib (the model's and the
    draft's weight files); [] when nvidia-smi gave no number."""
    memory = [int(line.strip()) for line in smi_lines or [] if line.strip().isdigit()]
    if not memory:
        return []
    return ["--gpu-memory-gib", f"{min(memory) / 1024:.3f}", "--weights-gib", f"{sum(weight_sizes) / GIB:.3f}"]


def sglang_plan_table(rows):
    """One line per service group (its first node's plan stands for it): group, model, TP, window, ring, MB per
    running request and requests per GB with ReplaySSM off/on, and the requests that fit with it on against
    --max-running-requests. Narrow enough that the YAML callback does not fold it."""
    lines, seen = [("GROUP", "MODEL", "TP", "WINDOW", "RING", "MB/REQ OFF/ON", "REQ/GB OFF/ON", "FIT/MAX")], set()
    for row in rows:
        if row["group"] in seen:
            continue
        seen.add(row["group"])
        plan = row.get("plan")
        if not plan:
            lines.append((row["group"], row["model"], "-", "-", "-", "-", "-", f"no plan: {row['note']}"))
            continue
        fit = plan.get("fit") or {}
        per, rate = plan["per_request_bytes"], plan["requests_per_gb"]
        lines.append(
            (
                row["group"],
                row["model"],
                str(plan["tp"]),
                str(plan["window"]),
                str(plan["ring_len"]),
                f"{per['off'] / 1e6:.1f}/{per['on'] / 1e6:.1f}",
                f"{rate['off']:.2f}/{rate['on']:.2f}",
                f"{fit['requests']['on']}/{fit['max_running_requests']}" if fit.get("requests") else "-",
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]) - 1)]
    return ["  ".join(cell.ljust(width) for cell, width in zip(line, widths)) + "  " + line[-1] for line in lines]


class FilterModule:
    """Filters of the preflight's capacity plan."""

    def filters(self):
        return {
            "sglang_plan_setup": sglang_plan_setup,
            "sglang_plan_fit_args": sglang_plan_fit_args,
            "sglang_plan_table": sglang_plan_table,
        }
