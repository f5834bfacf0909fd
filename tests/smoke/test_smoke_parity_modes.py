"""Parity's two modes against the stand-in server (tests/doubles/sglang_server.py, a test double of the
GPU server): strict against a reference running the target's algorithm with ReplaySSM off (the overlay's
bitwise guarantee: every token equal), tie-aware against a reference without speculation (where stock
SGLang itself agrees only up to near-ties).

The double's `--tie-at K` makes the target emit the runner-up of a near-tie at output position K, as a
kernel with another tie-break would; the references run without that knob.
"""

import pytest

K = 5
SAME_ALGORITHM_REPLAYSSM_OFF = ("--speculative-algorithm", "DFLASH")  # and no --enable-linear-replayssm-spec


def _parity(doc):
    return doc["exactness"]["parity"]


def test_auto_is_strict_against_the_same_algorithm_with_replayssm_off(double, smoke):
    target, reference = double("--tie-at", str(K)), double(*SAME_ALGORITHM_REPLAYSSM_OFF, spec=False)
    code, doc, text = smoke("--target", target, "--reference", reference, "--classes", "json")
    parity = _parity(doc)
    assert code == 1 and parity["passed"] is False and parity["mode"] == "strict" and parity["strict"]
    assert "ReplaySSM off" in parity["mode_reason"] and "must change no token" in parity["mode_reason"]
    assert parity["failing"] == parity["diverged_at_tie"] != []  # a tie is no excuse here
    assert doc["exactness"]["teacher_forced"]["passed"] is True  # only strict parity sees it
    assert "(strict:" in text


def test_strict_parity_passes_when_every_token_matches(double, smoke):
    target, reference = double(), double(*SAME_ALGORITHM_REPLAYSSM_OFF, spec=False)
    code, doc, text = smoke("--target", target, "--reference", reference, "--classes", "json")
    parity = _parity(doc)
    assert code == 0, text
    assert parity["mode"] == "strict" and parity["passed"] and parity["prompts_matching"] == parity["prompts"]
    assert not any("parity compares two different speculative runs" in n for n in doc.get("notes", []))


def test_auto_is_tie_aware_against_a_reference_without_speculation(double, smoke):
    target, reference = double("--tie-at", str(K)), double(spec=False)
    code, doc, _ = smoke("--target", target, "--reference", reference, "--classes", "json")
    parity = _parity(doc)
    assert code == 0 and parity["mode"] == "tie-aware" and parity["passed"] and parity["diverged_at_tie"]
    assert "without speculation" in parity["mode_reason"]


@pytest.mark.parametrize("flags,mode", [(("--parity", "tie-aware"), "tie-aware"), (("--strict-parity",), "strict")])
def test_an_explicit_mode_wins(double, smoke, flags, mode):
    target, reference = double("--tie-at", str(K)), double(*SAME_ALGORITHM_REPLAYSSM_OFF, spec=False)
    code, doc, _ = smoke("--target", target, "--reference", reference, "--classes", "json", *flags)
    parity = _parity(doc)
    assert parity["mode"] == mode and parity["mode_reason"] == f"--parity {mode}"
    assert code == (1 if mode == "strict" else 0)


def test_a_golden_file_from_the_same_algorithm_with_replayssm_off_is_strict(double, smoke, tmp_path):
    golden = tmp_path / "golden.json"
    reference = double(*SAME_ALGORITHM_REPLAYSSM_OFF, spec=False)
    code, _, text = smoke("--target", reference, "--record", str(golden), "--classes", "json")
    assert code == 0, text
    code, doc, _ = smoke("--target", double("--tie-at", str(K)), "--golden", str(golden), "--classes", "json")
    assert code == 1 and _parity(doc)["mode"] == "strict" and _parity(doc)["against"] == "golden"


def test_a_reference_with_replayssm_on_is_not_the_strict_reference(double, smoke):
    target, reference = double("--tie-at", str(K)), double()
    code, doc, _ = smoke("--target", target, "--reference", reference, "--classes", "json")
    assert _parity(doc)["mode"] == "tie-aware"
    assert any("parity compares two different speculative runs" in n for n in doc["notes"])


@pytest.mark.parametrize(
    "flags, row, needs",
    [
        (("--sglang-version", "0.5.21"), "ring-float32", "the ring commit is not the ReplaySSM-off state"),
        (("--mamba-ssm-dtype", "bfloat16"), "fold-low-precision-state", "claims nothing beyond it"),
        (
            ("--linear-attn-backend", "flashinfer"),
            "fold-float32-flashinfer-verify",
            "--linear-attn-verify-backend triton",
        ),
    ],
)
def test_auto_is_tie_aware_where_the_targets_row_allows_no_strict_parity(double, smoke, flags, row, needs):
    """The same flags with ReplaySSM off on both sides, but the target's row (its SGLang version, state dtype,
    the kernel stock SGLang verifies with on its flags) makes that reference no bitwise one."""
    target = double("--tie-at", str(K), *flags)
    reference = double(*SAME_ALGORITHM_REPLAYSSM_OFF, *flags, spec=False)
    code, doc, _ = smoke("--target", target, "--reference", reference, "--classes", "json")
    parity = _parity(doc)
    assert code == 0 and parity["mode"] == "tie-aware" and parity["passed"] and parity["diverged_at_tie"]
    assert row in parity["mode_reason"] and needs in parity["mode_reason"], parity["mode_reason"]


def test_auto_is_strict_against_a_triton_verifying_reference_of_a_flashinfer_target(double, smoke):
    target = double("--tie-at", str(K), "--linear-attn-backend", "flashinfer")
    reference = double(
        *SAME_ALGORITHM_REPLAYSSM_OFF,
        "--linear-attn-backend",
        "flashinfer",
        "--linear-attn-verify-backend",
        "triton",
        spec=False,
    )
    code, doc, _ = smoke("--target", target, "--reference", reference, "--classes", "json")
    assert code == 1 and _parity(doc)["mode"] == "strict", _parity(doc)["mode_reason"]
