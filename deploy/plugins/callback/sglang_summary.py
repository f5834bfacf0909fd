"""Lines an operator can follow during a rollout: one per batch, elapsed time per play, a summary per node.

Why a callback: Ansible's default output shows tasks, not the rollout. The roles record what each node
does in a fact, `sglang_service_report` ({action, from, to, outcome}, image names as tags, never 64-hex IDs);
this callback (enabled in deploy/ansible.cfg next to the default stdout callback) collects it and prints

    == batch 2 of "Roll out": node2 rso:v1 -> rso:v2 (ok)
    == "Roll out" took 41.2 s (3 batches)
    == summary of "Roll back": node1 rso:v2 -> rso:v1 (ok); node3 NOT DONE (not reached: an earlier batch failed)

A canary that was baked on live traffic (roles/sglang_bake) gets its bake's verdict and table under its line.

A play's summary names every node of the play that did not end its action well, so a stopped rollback
says which nodes are not on their previous image. A node lost in the middle of its action (SSH or the
node gone) says so, with Ansible's reason, instead of a bare FAILED.
"""

from __future__ import annotations

import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = r"""
name: sglang_summary
type: notification
short_description: per-batch, per-play and per-node summary lines of the sglang_* rollout playbooks
description:
  - Prints one line per batch (hosts, image from -> to as tags, outcome), the elapsed time of each play and,
    at the end, a per-node summary of every play whose nodes reported an sglang_service_report fact.
requirements:
  - enabled in ansible.cfg (callbacks_enabled = sglang_summary)
"""

GOOD = ("ok", "up to date", "finished earlier", "restarted")
# outcomes that start so are good too: a rollback that undid an interrupted switch with a healthy container
# back, a node a rollback leaves alone because the last run did not switch it, and a switch that went well
# on a node that was down before it ("ok, was down before its switch: ...")
GOOD_PREFIXES = ("undid an interrupted switch", "left alone", "ok, ")


class CallbackModule(CallbackBase):
    """Collects `sglang_service_report` facts and prints batch lines, play times and node summaries."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "notification"
    CALLBACK_NAME = "sglang_summary"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self._play = None  # name of the play running now
        self._play_start = 0.0
        self._batches = 0
        self._batch_hosts: list[str] = []
        self._failed: set[str] = set()
        self._plays: list[dict] = []  # {name, hosts, reports, lost: host -> why it was unreachable}, in order

    # -- collection ------------------------------------------------------------------------------
    def _seen(self, result, failed=False):
        host = result._host.get_name()
        if host not in self._batch_hosts:
            self._batch_hosts.append(host)
        if failed:
            self._failed.add(host)
        report = (result._result.get("ansible_facts") or {}).get("sglang_service_report")
        if isinstance(report, dict) and self._plays:
            self._plays[-1]["reports"][host] = report

    def v2_runner_on_ok(self, result):
        self._seen(result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._seen(result, failed=not ignore_errors)

    def v2_runner_on_unreachable(self, result):
        if not result._task_fields.get("ignore_unreachable") and self._plays:
            why = " ".join(str(result._result.get("msg", "")).split())[:300]
            self._plays[-1]["lost"][result._host.get_name()] = why
        self._seen(result, failed=not result._task_fields.get("ignore_unreachable"))

    def v2_runner_on_skipped(self, result):
        self._seen(result)

    # -- output ----------------------------------------------------------------------------------
    def _line(self, report, host, lost):
        failed = host in self._failed and report.get("outcome") in ("switching", "failed", None)
        outcome = report.get("outcome", "?")
        if host in lost:
            outcome = (
                f"LOST mid-{report.get('action', 'switch')} at '{report.get('outcome', '?')}': "
                f"{lost[host]}; its journals name what to put back: rerun make deploy or make rollback "
                f"once it is reachable"
            )
        elif failed:
            outcome = "FAILED"
        return f"{host} {report.get('from', '?')} -> {report.get('to', '?')} ({outcome})"

    @staticmethod
    def _bake_lines(report):
        """A baked canary's verdict and side-by-side table (roles/sglang_bake), under its node's line."""
        if not report.get("bake"):
            return []
        return ["  " + report["bake"]] + ["    " + line for line in str(report.get("bake_table", "")).splitlines()]

    def _done(self, host, report):
        """True when the node ended its action well: switched, up to date, rolled back, left alone."""
        outcome = str(report.get("outcome", ""))
        return host not in self._failed and (
            outcome in GOOD or (outcome.startswith(GOOD_PREFIXES) and "NOT healthy" not in outcome)
        )

    def _end_batch(self):
        if self._play is None or not self._plays:
            return
        reports = self._plays[-1]["reports"]
        hosts = [h for h in self._batch_hosts if h in reports]
        if hosts:
            lines = "; ".join(self._line(reports[h], h, self._plays[-1]["lost"]) for h in hosts)
            self._display.display(f'== batch {self._batches} of "{self._play}": {lines}')
        self._batch_hosts = []

    def _end_play(self):
        if self._play is None:
            return
        self._display.display(
            f'== "{self._play}" took {time.monotonic() - self._play_start:.1f} s'
            + (f" ({self._batches} batches)" if self._batches > 1 else "")
        )

    @staticmethod
    def _play_hosts(play):
        """Every host of the play, across its batches (the limit applies, the batch restriction not)."""
        try:
            inventory = play._variable_manager._inventory
            return [h.get_name() for h in inventory.get_hosts(play.hosts, ignore_restrictions=True)]
        except Exception:  # an Ansible without these internals: the hosts that reported will do
            return []

    def v2_playbook_on_play_start(self, play):
        name = play.get_name().strip()
        self._end_batch()
        if name == self._play:
            self._batches += 1
            return
        self._end_play()
        self._play, self._play_start, self._batches = name, time.monotonic(), 1
        self._plays.append({"name": name, "hosts": self._play_hosts(play), "reports": {}, "lost": {}})

    def v2_playbook_on_stats(self, stats):
        self._end_batch()
        self._end_play()
        for play in self._plays:
            if not play["reports"]:
                continue
            hosts = play["hosts"] or list(play["reports"])
            lines, not_done = [], []
            for host in hosts:
                report = play["reports"].get(host)
                if report is None:
                    lines.append(
                        f"{host} NOT DONE ("
                        + (
                            f"LOST: {play['lost'][host]}"
                            if host in play["lost"]
                            else "not reached: an earlier batch failed"
                        )
                        + ")"
                    )
                    not_done.append(host)
                    continue
                lines.append(self._line(report, host, play["lost"]))
                lines += self._bake_lines(report)
                if not self._done(host, report):
                    not_done.append(host)
            self._display.display(f'== summary of "{play["name"]}":')
            for line in lines:
                self._display.display(f"   {line}")
            if not_done:
                self._display.display(f'== "{play["name"]}" did not finish on: {", ".join(not_done)}')
