"""benchmarks/ncu_regions.py on a hand-made SASS listing and source page: which loop is the step loop, which
the item loop, and that every sample lands in its region (the profile itself needs a GPU; this does not)."""

import csv
import io

import pytest

from benchmarks import ncu_regions

# setup (0x00-0x20), the item loop (0x30-0xd0) holding a normalization loop (0x40-0x50, 1 FFMA), the step
# loop (0x60-0x90, 3 FFMAs) and its remainder (0xa0-0xb0, 2 FFMAs), then the exit (0xe0)
SASS = """
        /*0000*/                   S2R R0, SR_TID.X ;
        /*0010*/                   LDG.E R2, desc[UR4][R2.64] ;
        /*0020*/                   FFMA R4, R2, R2, R4 ;
        /*0030*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*0040*/                   FFMA R5, R5, R5, R5 ;
        /*0050*/              @P0  BRA 0x40 ;
        /*0060*/                   FFMA R6, R6, R6, R6 ;
        /*0070*/                   FFMA R7, R7, R7, R7 ;
        /*0080*/                   FFMA R8, R8, R8, R8 ;
        /*0090*/              @P1  BRA 0x60 ;
        /*00a0*/                   FFMA R9, R9, R9, R9 ;
        /*00b0*/                   FFMA R9, R9, R9, R9 ;
        /*00c0*/              @P2  BRA 0xa0 ;
        /*00d0*/              @P3  BRA 0x30 ;
        /*00e0*/                   EXIT ;
"""


def _page(samples: dict[int, tuple[int, int]], base: int = 0x7F0000001000) -> list[dict]:
    """A source page: offset -> (stall_long_sb samples, instructions executed); every other stall 0."""
    out = io.StringIO()
    w = csv.writer(out, quoting=csv.QUOTE_ALL)
    w.writerow(["Kernel Name", "gdn_fold_conv2"])
    w.writerow(["Address", "Source", "Instructions Executed", "stall_long_sb", "stall_barrier",
                "stall_long_sb (Not Issued)"])
    for off, (long_sb, executed) in sorted(samples.items()):
        w.writerow([hex(base + off), "X", executed, long_sb, 0, 99])
    return list(csv.DictReader(out.getvalue().splitlines()[1:]))


def test_the_step_loop_and_the_item_loop_are_found_by_their_structure():
    item, steps = ncu_regions.region_bounds(ncu_regions.parse_sass(SASS))
    assert steps == [(0x60, 0x90), (0xA0, 0xC0)]  # innermost, most FFMAs; not the normalization loop
    assert item == (0x30, 0xD0)
    assert [ncu_regions.region(o, item, steps) for o in (0x10, 0x40, 0x70, 0xB0, 0xD0, 0xE0)] == \
        ["setup", "per-item", "step loop", "step loop", "per-item", None]


def test_samples_are_summed_per_region_as_shares_of_all():
    rows = _page({0x10: (10, 1), 0x40: (30, 2), 0x70: (50, 6), 0xB0: (10, 1), 0xE0: (0, 0)})
    summary = ncu_regions.summarize(rows, ncu_regions.parse_sass(SASS))
    assert {k: v["samples_pct"] for k, v in summary.items()} == {"setup": 10.0, "per-item": 30.0, "step loop": 60.0}
    assert {k: v["instructions_pct"] for k, v in summary.items()} == {"setup": 10.0, "per-item": 20.0,
                                                                       "step loop": 70.0}
    assert summary["per-item"]["stalls_pct"] == {"long_sb": 30.0, "barrier": 0.0}  # "Not Issued" columns left out


def test_a_cubin_without_the_commit_kernels_loops_is_refused():
    flat = "\n".join(line for line in SASS.splitlines() if "BRA" not in line)
    with pytest.raises(ValueError, match="no step loop"):
        ncu_regions.region_bounds(ncu_regions.parse_sass(flat))


def test_the_source_page_is_read_past_its_kernel_line(tmp_path):
    path = tmp_path / "page.csv"
    path.write_text('"Kernel Name","gdn_fold_conv2",\n"Address","Source","Instructions Executed"\n"0x10","X","4"\n')
    assert ncu_regions.read_source_page(path) == [{"Address": "0x10", "Source": "X", "Instructions Executed": "4"}]
