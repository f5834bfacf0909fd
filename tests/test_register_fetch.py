"""benchmarks/register_fetch.py without a GPU: the reuse-cache model on hand-made SASS, that each probe's SASS
is the pattern its GPU timing is read as (a probe ptxas compiled otherwise would time something else), and the
count on the shipped step loop."""

from pathlib import Path

import pytest

from benchmarks import ncu_regions, register_fetch
from replayssm_overlay.kernels import nvrtc


@pytest.mark.parametrize("listing, expected", [
    (["FFMA R1, R2, R3, R4"], [3]),
    (["FFMA R5, R2.reuse, R6, R5", "FFMA R7, R2, R8, R7"], [3, 2]),  # R2 from the reuse cache of slot 0
    (["FFMA R1, R2.reuse, R3, R1", "FMUL R9, R10, R11", "FFMA R4, R2, R5, R4"], [3, 2, 3]),  # evicted between
    (["FFMA R1, R2.reuse, R3, R1", "FFMA R4, R5, R2, R4"], [3, 3]),  # the cache is per slot
    # once, unless marked again
    (["FFMA R1, R2, R3.reuse, R1", "FFMA R4, R5, R3, R4", "FFMA R6, R7, R3, R6"], [3, 2, 3]),
    (["@P0 FFMA R1, R2, RZ, R3", "FMUL R1, R2, UR4", "FADD R1, R2, -R2", "SHFL.BFLY PT, R5, R6, 0x4, 0x1f"],
     [2, 1, 1, 1]),
])
def test_fetches_follow_the_reuse_flags_per_slot(listing, expected):
    assert register_fetch.fetched(listing) == expected


@pytest.fixture(scope="module")
def probes(tmp_path_factory):
    path = tmp_path_factory.mktemp("probes") / "register_fetch.cubin"
    path.write_bytes(register_fetch.probe_cubin())
    return path


def _loop_ffmas(cubin: Path, name: str) -> list[str]:
    return [text for text in register_fetch.timed_loop(ncu_regions.sass_of(cubin, name)) if text.startswith("FFMA")]


def test_each_probe_fetches_what_it_is_named_for(probes):
    found = register_fetch.probe_fetches(probes)
    assert set(found) == {*register_fetch.PROBES, *register_fetch.QUAD_PROBES}
    assert found["fetch3"]["fetch3"] >= 0.95 * found["fetch3"]["fp32"]
    for two in ("reuse2", "fadd2", "same_bank2", "cross_bank2"):  # the first of a pass may fetch three
        assert found[two]["fetch3"] <= 4, (two, found[two])
    assert 0.4 <= found["mix"]["fetch3"] / found["mix"]["fp32"] <= 0.6
    assert found["shfl_fadd"]["instructions"] >= 2 * found["shfl_fadd"]["fp32"]  # a shuffle per add


@pytest.mark.parametrize("name, same", [("same_bank2", True), ("cross_bank2", False)])
def test_the_bank_probes_pair_registers_of_the_parity_they_claim(probes, name, same):
    """FFMA Rd, Ra, Rb.reuse, Rc: the two fetched sources a and c are both even or both odd in same_bank2,
    one of each in cross_bank2 (a quad's component x meets x, or y)."""
    ffmas = _loop_ffmas(probes, name)
    pairs = [[int(o.strip().lstrip("R").split(".")[0]) for o in (f.split(",")[1], f.split(",")[3])] for f in ffmas]
    matching = sum((a % 2 == c % 2) == same for a, c in pairs)
    assert matching >= 0.95 * len(pairs), (name, ffmas[:4])


def test_the_shipped_step_loop_has_the_fp32_work_the_bits_fix(tmp_path):
    """4 steps of 4 columns x 16 k a thread: 64 update FFMAs and 48 in the dot's chains a step."""
    cubin, _ = nvrtc.build_fold()
    (tmp_path / "fold.cubin").write_bytes(cubin)
    counts = register_fetch.step_loop_fetches(tmp_path / "fold.cubin")
    assert counts["ffma"] == 4 * (64 + 48)
    assert counts["ffma_fetch3"] <= counts["fetch3"] <= counts["instructions"]


def test_probe_needs_an_output_folder(capsys):
    with pytest.raises(SystemExit):
        register_fetch.main(["--probe"])
    assert "--probe needs --out" in capsys.readouterr().err
