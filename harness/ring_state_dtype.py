"""The ring's distance from the decode recurrence with another SSM state dtype (harness only).

`exactness.RING_ERROR_BOUND` was measured with a float32 state. Run as `python -m harness.ring_state_dtype
DTYPE` in a process whose PYTHONPATH puts a ring release's tree first: it runs the ring scenarios
(`harness.ring_cycle.RING_SCENARIOS`) with SGLang's MTP commit on a pool whose state is DTYPE, against the
recurrence run token by token on a state of the same dtype, and prints one JSON line per scenario.
"""

import dataclasses
import json
import sys


def main(argv=None) -> int:
    from harness import on_cpu

    on_cpu.prepare()
    import torch

    from harness.ring_cycle import RING_MODEL, RING_SCENARIOS, mtp_commit, run_ring_cycle

    model = dataclasses.replace(RING_MODEL, state_dtype=getattr(torch, (argv or sys.argv[1:])[0]))
    for scenario in RING_SCENARIOS:

        def commit(worker, batch, pre, post, commit_lens, draft_tokens=scenario.draft_tokens):
            mtp_commit(worker, batch, commit_lens, draft_tokens)

        result = run_ring_cycle(scenario, commit, model=model).to_dict()
        print(
            json.dumps(
                {
                    key: result[key]
                    for key in ("scenario", "algorithm", "steps", "committed_steps", "error", "max_relative_rms")
                }
            ),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
