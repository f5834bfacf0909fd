"""Exactness, two independent ways.

Teacher-forced: the generated tokens are sent back after the prompt as `input_ids` with
`return_logprob`, `logprob_start_len = len(prompt) - 1` and `top_logprobs_num = k`. In 0.5.19's answer
(scheduler_components/logprob_result_processor.py) `input_top_logprobs[j]` is the top-k of the
distribution that predicts input position `logprob_start_len + j` (entry 0 is null), as
`[logprob, token_id, text]` triples, and `input_token_logprobs[j]` the logprob of the token actually
there. Every generated token must be the argmax; one that is not, but within `tie_margin` of it, is a
tie (reported, not failed).

Parity: the generated token ids against a reference server without speculation, or a golden file; the
first divergence per prompt is reported, with whether the target's own logprobs show a tie there.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import SmokeEnvironmentError
from .runner import Deadline, Generation, check_answer, malformed


@dataclass
class TeacherForced:
    prompt_id: str
    positions: list[dict]  # per generated token: got, got_logprob, top [[logprob, id], ...]
    violations: list[dict]
    ties: list[dict]

    def describe(self) -> str:
        verdict = f"{len(self.violations)} violation(s)" if self.violations else "ok"
        ties = f", {len(self.ties)} tie(s)" if self.ties else ""
        return f"{self.prompt_id}: teacher-forced {len(self.positions)} tokens, {verdict}{ties}"


def _triple(url: str, value, where: str) -> tuple[float, int]:
    if (
        not isinstance(value, list)
        or len(value) < 2
        or not isinstance(value[0], (int, float))
        or not isinstance(value[1], int)
    ):
        raise malformed(url, f"{where} is not a [logprob, token_id, text] triple: {value!r}")
    return float(value[0]), value[1]


def teacher_force(url: str, gen: Generation, top_k: int, tie_margin: float, deadline: Deadline) -> TeacherForced:
    n_prompt, out = len(gen.prompt_ids), gen.output_ids
    payload = {
        "input_ids": gen.prompt_ids + out,
        "sampling_params": {"temperature": 0.0, "max_new_tokens": 1},
        "return_logprob": True,
        "logprob_start_len": n_prompt - 1,
        "top_logprobs_num": top_k,
    }
    answer = deadline.post_json(url + "/generate", payload)
    meta = check_answer(url, answer, gen.prompt.id)
    tops, toks = meta.get("input_top_logprobs"), meta.get("input_token_logprobs")
    if (
        not isinstance(tops, list)
        or not isinstance(toks, list)
        or len(tops) != len(out) + 1
        or len(toks) != len(out) + 1
    ):
        raise malformed(
            url,
            f"teacher-forced answer for {gen.prompt.id} lacks input_top_logprobs/"
            f"input_token_logprobs of length {len(out) + 1}",
        )
    result = TeacherForced(gen.prompt.id, [], [], [])
    for i, got in enumerate(out):
        got_lp, got_id = _triple(url, toks[i + 1], f"input_token_logprobs[{i + 1}]")
        if got_id != got:
            raise malformed(url, f"input_token_logprobs[{i + 1}] scores token {got_id}, the input there is {got}")
        row = tops[i + 1]
        if not isinstance(row, list) or not row:
            raise malformed(url, f"input_top_logprobs[{i + 1}] is empty")
        top = [_triple(url, t, f"input_top_logprobs[{i + 1}]") for t in row]
        best_lp, best_id = top[0]
        result.positions.append({"got": got, "got_logprob": got_lp, "top": [[lp, tid] for lp, tid in top]})
        if best_id == got:
            continue
        margin = best_lp - got_lp
        record = {
            "prompt_id": gen.prompt.id,
            "position": i,
            "expected": best_id,
            "got": got,
            "margin": margin,
            "expected_logprob": best_lp,
            "got_logprob": got_lp,
        }
        (result.ties if margin <= tie_margin else result.violations).append(record)
    return result


def teacher_forced_summary(results: list[TeacherForced], tie_margin: float, top_k: int) -> dict:
    violations = [v for r in results for v in r.violations]
    return {
        "passed": not violations,
        "checked_tokens": sum(len(r.positions) for r in results),
        "prompts": len(results),
        "tie_margin": tie_margin,
        "top_logprobs_num": top_k,
        "violations": violations,
        "ties": [t for r in results for t in r.ties],
    }


def first_divergence(target: list[int], reference: list[int], tf: TeacherForced, tie_margin: float) -> dict | None:
    """None when the sequences are equal; else where and how they first differ."""
    n = min(len(target), len(reference))
    pos = next((i for i in range(n) if target[i] != reference[i]), None)
    if pos is None:
        if len(target) == len(reference):
            return None
        return {
            "position": n,
            "target_token": target[n] if n < len(target) else None,
            "reference_token": reference[n] if n < len(reference) else None,
            "tie": False,
            "margin": None,
            "note": "one side stopped earlier",
        }
    t, r = target[pos], reference[pos]
    row = tf.positions[pos]
    lp = {tid: lp for lp, tid in row["top"]}
    lp[t] = row["got_logprob"]
    if r in lp:
        margin = abs(lp[t] - lp[r])
        tie = margin <= tie_margin
        note = "near-tie in the target's logprobs" if tie else "the target scores the two tokens apart"
    else:
        margin, tie = None, False
        note = f"the reference token is not in the target's top-{len(row['top'])}"
    return {"position": pos, "target_token": t, "reference_token": r, "tie": tie, "margin": margin, "note": note}


def parity(
    gens: list[Generation],
    tfs: dict[str, TeacherForced],
    reference: dict[str, tuple[list[int], list[int]]],
    against: str,
    tie_margin: float,
    strict: bool,
) -> dict:
    """reference: prompt id -> (prompt token ids, output ids) from the reference server or golden file."""
    first: dict[str, dict | None] = {}
    for gen in gens:
        ref_prompt, ref_out = reference[gen.prompt.id]
        if list(ref_prompt) != list(gen.prompt_ids):
            raise SmokeEnvironmentError(
                f"prompt {gen.prompt.id!r} tokenizes differently on the target and the {against}",
                "parity needs the same model and tokenizer on both sides (re-record the golden file if the prompts "
                "changed)",
            )
        first[gen.prompt.id] = first_divergence(gen.output_ids, ref_out, tfs[gen.prompt.id], tie_margin)
    diverged = {k: v for k, v in first.items() if v is not None}
    failing = [k for k, v in diverged.items() if strict or not v["tie"]]
    return {
        "passed": not failing,
        "against": against,
        "strict": strict,
        "prompts": len(first),
        "prompts_matching": len(first) - len(diverged),
        "diverged_at_tie": sorted(k for k, v in diverged.items() if v["tie"]),
        "failing": sorted(failing),
        "first_divergence": first,
    }
