"""One table says what is bitwise where (`replayssm_overlay.exactness.ROWS`); for every row, a serving
process's record of a configuration in that row makes `replayssm-overlay status --json` (`exactness`) on
that release's real tree, the metrics, the README table and `replayssm-smoke --parity auto` say the same.

The records are written here by this process (alive), through the self-check's own entry point with the
pool's state dtype and the kernel stock SGLang would verify with (SGLang's fold in use: nothing to run).
Status reads read-only trees and changes nothing. Also: records of another SGLang tree on the node are
listed as node-wide and never decide this tree's claim; on a ring release `kernels.fold` names SGLang's
MTP commit.
"""

import json
from pathlib import Path

import pytest

from harness.release_trees import OTHER_RELEASES
from harness.ring_cycle import RING_ERROR_BOUND
from replayssm_overlay import exactness, fold, metrics, protocol, records, selfcheck
from replayssm_overlay.cli import main
from replayssm_overlay.verify_kernel import FLASHINFER, TRITON
from replayssm_smoke import parity_mode

REPO = Path(__file__).resolve().parents[2]
DOCS = (REPO / "README.md", REPO / "smoke_tests" / "README.md")
RING_RELEASE = OTHER_RELEASES[0]

# row -> (release, --mamba-ssm-dtype, linear-attention flags of a configuration in it)
CONFIGURATIONS = {
    "fold-float32-triton-verify": ("0.5.19", "float32", {}),
    "fold-float32-flashinfer-verify": ("0.5.19", "float32", {"linear_attn_backend": "flashinfer"}),
    "fold-low-precision-state": ("0.5.19", "bfloat16", {"linear_attn_decode_backend": "flashinfer"}),
    "ring-float32": (RING_RELEASE, "float32", {"linear_attn_backend": "flashinfer"}),
    "ring-low-precision-state": (RING_RELEASE, "bfloat16", {}),
    "unknown-release": ("0.5.18", "float32", {}),
}
SERVED_ROWS = [row.key for row in exactness.ROWS if row.protocol]


def test_every_row_has_a_configuration():
    assert set(CONFIGURATIONS) == set(exactness.ROW_BY_KEY)


@pytest.fixture(autouse=True)
def fresh_node(monkeypatch, tmp_path):
    monkeypatch.setenv(records.ENV_DIR, str(tmp_path / "state"))
    monkeypatch.setenv("RSO_KERNEL_DIR", str(tmp_path / "no-kernels"))
    monkeypatch.setenv(fold.ENV_FOLD, "sglang")  # the self-check then has nothing to run
    monkeypatch.setattr(fold, "_choice", None)
    monkeypatch.setattr(selfcheck, "_checked", {})


def _status(capsys, tree, *extra):
    assert main(["status", "--sglang-dir", str(tree), *extra]) == 0
    out = capsys.readouterr().out
    return json.loads(out) if "--json" in extra else out


def _serve(monkeypatch, tree, state_dtype: str, stock_verify: str) -> dict:
    """This process's self-check record as a server of `tree` with that pool and verify kernel writes it."""
    monkeypatch.setattr(records, "imported_sglang_dir", lambda: str(Path(tree).resolve()))
    geometry = selfcheck.Geometry(
        num_v_heads=32,
        num_k_heads=16,
        head_v_dim=128,
        head_k_dim=128,
        window=16,
        state_dtype=state_dtype,
        ring_dtype="bfloat16",
    )
    return selfcheck.check_before_serving(
        geometry, seed=1, protocol_name=protocol.of_tree(tree), stock_verify=stock_verify
    )


def _summary(release: str, state_dtype: str, flags: dict, spec: bool) -> dict:
    return {
        "sglang_version": release,
        "speculative_algorithm": "DFLASH",
        "speculative_num_draft_tokens": 16,
        "enable_linear_replayssm_spec": spec,
        "mamba_ssm_dtype": state_dtype,
        **flags,
    }


@pytest.mark.parametrize("key", SERVED_ROWS)
def test_status_and_metrics_say_the_row_of_the_serving_configuration(tree_of, capsys, monkeypatch, key):
    release, state_dtype, flags = CONFIGURATIONS[key]
    tree = tree_of(release)
    from replayssm_overlay.verify_kernel import stock_verify_kernel

    record = _serve(monkeypatch, tree, state_dtype, stock_verify_kernel(flags, sm_major=9))
    status = _status(capsys, tree, "--json")
    row = exactness.ROW_BY_KEY[key]
    claim = status["exactness"]
    assert claim == record["exactness"] and claim["row"] == key, claim
    assert claim["bitwise_equal_to"] == row.bitwise_equal_to and claim["parity"] == row.parity
    assert claim["statement"] == row.statement.format(state=state_dtype)
    found = metrics.facts(status)
    assert found["bitwise_equal_to"] == row.bitwise_equal_to and found["exactness_row"] == key
    text = metrics.exposition(found)
    assert f'bitwise_equal_to="{row.bitwise_equal_to or "none"}"' in text and f'exactness_row="{key}"' in text
    assert f"commit:   {claim['commit']}: {claim['statement']}" in _status(capsys, tree)


@pytest.mark.parametrize("key", list(CONFIGURATIONS))
def test_parity_auto_picks_the_rows_mode_against_the_same_flags_with_replayssm_off(key):
    release, state_dtype, flags = CONFIGURATIONS[key]
    row = exactness.ROW_BY_KEY[key]
    target, reference = _summary(release, state_dtype, flags, True), _summary(release, state_dtype, flags, False)
    assert parity_mode.target_row(target) == row
    plain_mode, why = parity_mode.choose("auto", target, reference)
    assert plain_mode == (exactness.STRICT if key == "fold-float32-triton-verify" else exactness.TIE_AWARE), why
    assert key in why
    triton_reference = {**reference, "linear_attn_verify_backend": TRITON}
    assert parity_mode.choose("auto", target, triton_reference)[0] == row.parity


def test_a_flashinfer_verify_row_names_the_triton_reference():
    release, state_dtype, flags = CONFIGURATIONS["fold-float32-flashinfer-verify"]
    mode, why = parity_mode.choose(
        "auto", _summary(release, state_dtype, flags, True), _summary(release, state_dtype, flags, False)
    )
    assert mode == exactness.TIE_AWARE and "--linear-attn-verify-backend triton" in why


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_the_readmes_carry_the_table(doc):
    assert exactness.markdown_table() in doc.read_text()


def test_without_a_record_status_says_what_it_assumed(tree_of, capsys):
    claim = _status(capsys, tree_of("0.5.19"), "--json")["exactness"]
    assert claim["row"] == "fold-float32-triton-verify" and claim["commit"] == exactness.SGLANG_FOLD
    assert "assumed: a float32 state and the Triton verify" in claim["statement"]
    assert any("track slot" in c for c in claim["caveats"])
    assert any("SGLANG_MAMBA_CONV_DTYPE=float16" in c for c in claim["caveats"])


def test_another_trees_record_is_node_wide_and_decides_nothing(tree_of, capsys, monkeypatch, tmp_path):
    _serve(monkeypatch, tmp_path / "another" / "sglang", "bfloat16", FLASHINFER)
    status = _status(capsys, tree_of("0.5.19"), "--json")
    (record,) = status["selfcheck"]
    assert record["alive"] and record["scope"] == records.NODE
    assert status["exactness"]["row"] == "fold-float32-triton-verify"
    assert metrics.facts(status)["serving_processes"] == 0
    assert "node-wide, SGLang at " in _status(capsys, tree_of("0.5.19"))


@pytest.mark.parametrize("release", OTHER_RELEASES)
def test_on_a_ring_release_the_kernels_name_sglangs_mtp_commit(tree_of, capsys, release):
    status = _status(capsys, tree_of(release), "--json")
    assert status["protocol"] == protocol.RING and status["kernels"]["fold"] == exactness.RING_COMMIT
    assert status["exactness"]["row"] == "ring-float32" and protocol.MTP_COMMIT in status["exactness"]["commit"]


def test_the_stated_ring_bound_is_the_one_the_ring_cycle_holds():
    assert exactness.RING_ERROR_BOUND == RING_ERROR_BOUND


def test_the_float16_ring_caveat_states_which_bfloat16_values_float16_holds():
    import torch

    values = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    values = values[torch.isfinite(values)]
    lost, size = values.half().bfloat16() != values, values.float().abs()
    low = 2.0**exactness.FLOAT16_EXACT_BFLOAT16_EXPONENT
    assert not lost[(size >= low) & (size <= 65504)].any() and lost[size < low].any() and lost[size > 65504].all()
    changed = []
    for seed in range(3):
        x = torch.randn(2**20, generator=torch.Generator().manual_seed(seed)).bfloat16()
        silu = torch.nn.functional.silu(x.float()).bfloat16()
        changed.append(int((silu.half().bfloat16() != silu).sum()))
    assert (min(changed), max(changed)) == (8, 11)
    assert "8 to 11 of 2^20 SiLU outputs" in exactness.conv_dtype_caveat(None)
