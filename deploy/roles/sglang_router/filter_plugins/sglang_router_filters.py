"""Filters of the sglang_router role: the batches a serial play makes, a first batch that leaves no canary, and
the batches a router's floor refuses.

Why Python: the floor check needs Ansible's own batch arithmetic (`serial` as a list of counts and
percentages, the last one repeated; `PlaybookExecutor._get_serialized_batches` and `pct_to_int` in
ansible-core 2.19) and a count per router over the router's own worker list; both are loops that Jinja
would only obscure.
"""

from __future__ import annotations

import json

from ansible.errors import AnsibleFilterError


def _batch_size(value, total: int) -> int:
    """One `serial` entry as Ansible reads it: "N%" of the play's hosts (at least 1), else an integer."""
    if isinstance(value, str) and value.strip().endswith("%"):
        return int((int(value.strip()[:-1]) / 100.0) * total) or 1
    return int(value)


def sglang_batches(serial, hosts):
    """The hosts of each batch, in order, as a play with this `serial` runs them (a size <= 0 or an empty list
    is one batch of every host, as in Ansible; the guard refuses those before any play)."""
    hosts = list(hosts)
    sizes = list(serial) if isinstance(serial, (list, tuple)) else [serial]
    if not sizes:
        return [hosts] if hosts else []
    try:
        sizes = [_batch_size(v, len(hosts)) for v in sizes]
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"serial {serial!r} is not a list of counts and percentages: {exc}") from exc
    batches, item = [], 0
    while hosts:
        size = sizes[item]
        if size <= 0:
            return batches + [hosts]
        batches.append(hosts[:size])
        hosts = hosts[size:]
        item = min(item + 1, len(sizes) - 1)
    return batches


def sglang_first_batch_problems(serial, hosts, groups, play_group):
    """Why the first batch of this `serial` leaves no canary: it covers every node of the play (`hosts`, in
    play order), or every node of one of its service groups, the groups of `groups` (Ansible's group ->
    hosts) inside `play_group`. A play or group of one node has no canary to spare and passes."""
    hosts = list(hosts)
    batches = sglang_batches(serial, hosts)
    first = batches[0] if batches else []
    shown = json.dumps(serial)
    if len(hosts) > 1 and set(first) >= set(hosts):
        return [f"the first batch of SERIAL={shown} is every node of the play ({len(hosts)}: {', '.join(hosts)})"]
    members = set(groups.get(play_group) or [])
    return [
        f"the first batch of SERIAL={shown} ({', '.join(first)}) is every node of the service group "
        f"{group} ({', '.join(group_hosts)})"
        for group, group_hosts in sorted(groups.items())
        if group not in ("all", "ungrouped", play_group)
        and len(group_hosts) > 1
        and set(group_hosts) <= members
        and set(group_hosts) <= set(first)
    ]


def sglang_router_floor_problems(batches, nodes, listings, numbered=True):
    """One message per batch that would leave a router with fewer healthy workers than its floor.

    `nodes`: host -> {router, worker_url, floor}; `listings`: router URL -> the router's workers (url,
    is_healthy). Every node of a batch that the router lists healthy leaves it for the switch, whether the
    node turns out up to date or not (the check comes before anything is known or changed). `numbered`:
    name the batches by their place in the run ("batch 2"), else "the batch" (one batch, checked live).
    """
    problems = []
    for number, batch in enumerate(batches, 1):
        by_router = {}
        for host in batch:
            node = nodes.get(host) or {}
            if node.get("router"):
                by_router.setdefault(node["router"], []).append(host)
        for router, hosts in sorted(by_router.items()):
            workers = listings.get(router) or []
            healthy = {w["url"].rstrip("/") for w in workers if w.get("is_healthy")}
            leaving = [h for h in hosts if str(nodes[h]["worker_url"]).rstrip("/") in healthy]
            floor = max(int(nodes[h]["floor"]) for h in hosts)
            left = len(healthy) - len(leaving)
            if left < floor:
                name = f"batch {number}" if numbered else "the batch"
                ill = sorted(w["url"].rstrip("/") for w in workers if not w.get("is_healthy"))
                problems.append(
                    f"{name} ({len(batch)} node(s): {', '.join(batch)}) would take {len(leaving)} of the "
                    f"{len(healthy)} healthy workers of the router at {router} out at once, leaving {left}, below "
                    f"its floor sglang_router_min_healthy={floor}"
                    + (f" (the router lists {', '.join(ill)} as unhealthy)" if ill else "")
                )
    return problems


class FilterModule:
    """Filters for the sglang_router role."""

    def filters(self):
        return {
            "sglang_batches": sglang_batches,
            "sglang_first_batch_problems": sglang_first_batch_problems,
            "sglang_router_floor_problems": sglang_router_floor_problems,
        }
