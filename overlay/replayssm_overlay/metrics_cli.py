"""`replayssm-overlay metrics`: the node's watched facts (`metrics.py`) as Prometheus text or JSON.

A periodic job on the node (the deploy role `sglang_monitor` installs one) runs it inside the serving
container, where the self-check records and the patched SGLang are, and hands the text to node_exporter's
textfile collector; `--out` writes the file itself, atomically (a temp name the collector ignores, then
a rename), so a scrape never reads half a file.
"""

from __future__ import annotations

from replayssm_overlay import metrics
from replayssm_overlay.cliutil import EXIT_OK, HelpFormatter, atomic_write, emit, print_json
from replayssm_overlay.errors import OverlayError
from replayssm_overlay.promtext import parse_labels

SCHEMA_HELP = """\
JSON (--json):
  overlay_version          version of the overlay package
  sglang_release           release the files' hashes identify, or null
  sglang_declared_version  version the installation declares, or null
  patch_state              pristine | patched | mixed | unknown | missing
  unverified               true if a file was patched over an unknown base
  protocol                 fold | ring | null (status --json's protocol)
  bitwise_equal_to         what the commit's state is bitwise equal to
                           (status --json's exactness), or null
  exactness_row            the row of the table "What is bitwise where" that
                           applies (status --json's exactness.row)
  fold_in_use[]            the folds live serving processes of this SGLang tree
                           commit with (their self-check records;
                           sglang-mtp-commit on a ring release), or ["none"]
  fold_expected            the fold a new serving process would choose
                           (sglang-mtp-commit on a ring release)
  serving_processes        live serving processes with a self-check record
  selfcheck_outcomes       {outcome: live processes}
  unreadable_records       self-check records that could not be read
  fallback_shapes[]        commit shapes live processes ran with SGLang's fold
  warmup_outcomes          {outcome: live processes} of the warm-up of SGLang's
                           commit on their pool (status --json:
                           selfcheck[].warmup)
  warmup_compiles          Triton compiles those warm-ups ran
  warmup_seconds_max       the longest of those warm-ups

Prometheus text (default): replayssm_overlay_info{overlay_version, sglang_release,
sglang_version, patch_state, unverified, protocol, bitwise_equal_to, exactness_row},
replayssm_overlay_fold_in_use{fold} (0/1,
every kind present), replayssm_overlay_serving_processes,
replayssm_overlay_selfcheck_processes{outcome}, replayssm_overlay_unreadable_records,
replayssm_overlay_fallback_shapes, replayssm_overlay_fallback_shape{shape},
replayssm_overlay_warmup_processes{outcome}, replayssm_overlay_warmup_compiles,
replayssm_overlay_warmup_seconds_max; each sample carries the --label pairs.
"""


def register(sub, common, report) -> None:
    """Add the `metrics` subcommand; `report(args)` returns the `status --json` document."""
    cmd = sub.add_parser(
        "metrics",
        parents=[common],
        formatter_class=HelpFormatter,
        help="print what status knows as Prometheus text (node_exporter's textfile collector) or JSON",
        description="Reduce `status --json` to the facts a fleet watches: the fold each live serving process "
        "commits with, the self-check outcomes, the commit shapes that fell back to SGLang's fold, the "
        "overlay and SGLang versions. Run it inside the serving container (the self-check records are "
        "there); the deploy role sglang_monitor runs it periodically.",
        epilog="examples:\n  replayssm-overlay metrics --json\n"
        "  replayssm-overlay metrics --label service=sglang-overlay \\\n"
        "      --out /var/lib/prometheus/node-exporter/replayssm.prom\n\n" + SCHEMA_HELP,
    )
    cmd.add_argument(
        "--label",
        action="append",
        metavar="KEY=VALUE",
        help="a label put on every sample (repeatable), e.g. service=sglang-overlay (default: none)",
    )
    cmd.add_argument(
        "--out", metavar="FILE", help="write the text to FILE atomically, its folder must exist (default: stdout)"
    )
    cmd.set_defaults(handler=lambda args: _metrics(args, report))


def _metrics(args, report) -> int:
    try:
        labels = parse_labels(args.label)
    except ValueError as err:
        raise OverlayError(f"--label {err}", "give --label KEY=VALUE, e.g. --label service=sglang-overlay") from None
    found = metrics.facts(report(args))
    if args.json:
        print_json(found)
        return EXIT_OK
    text = metrics.exposition(found, labels)
    if args.out:
        atomic_write(args.out, text)
    else:
        emit(text)
    return EXIT_OK
