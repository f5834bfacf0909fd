"""benchmarks/timing.py's results folder (`Run`), which every GPU benchmark script writes through: it must
keep what a run measured up to the moment it is cut short (the device tool returns what is under $OUT when
a command runs past its limit). Also what the scripts decide without a GPU: their imports, gpu_commit's
`--cuda` argument, the sweep's cases. The CUDA timings need a GPU and run only there."""

import json

import pytest

from benchmarks import timing
from benchmarks.gpu_commit import cuda_choice
from replayssm_overlay.kernels.cuda_fold import GRIDS


def test_a_run_keeps_each_line_and_the_latest_results_as_it_goes(tmp_path, capsys):
    results = {"timing": []}
    run = timing.Run(results)
    run.start(tmp_path / "out" / "nested", "log_3.7.1.txt", "commit_3.7.1.json")
    run.log("env", {"triton": "3.7.1"})
    results["timing"].append({"B": 8, "graph_us": 482.0})
    run.save()
    run.log("time", 1, 2.5)
    results["timing"].append({"B": 32})  # not saved yet: the file holds the last save
    folder = tmp_path / "out" / "nested"
    assert (folder / "log_3.7.1.txt").read_text() == "env {'triton': '3.7.1'}\ntime 1 2.5\n"
    assert json.loads((folder / "commit_3.7.1.json").read_text()) == {"timing": [{"B": 8, "graph_us": 482.0}]}
    assert capsys.readouterr().out == "env {'triton': '3.7.1'}\ntime 1 2.5\n"
    run.save()
    assert len(json.loads((folder / "commit_3.7.1.json").read_text())["timing"]) == 2


def test_each_gpu_benchmark_reaches_the_timing_module_by_its_name():
    """A module-level function named `timing` in a benchmark shadows the module, and every timing call of that
    script then fails on the GPU only (it did: three scripts, one device call). Importing them needs no GPU."""
    import importlib

    for name in ("gpu_commit", "gpu_run", "gpu_ring", "gpu_sweep"):
        module = importlib.import_module(f"benchmarks.{name}")
        assert module.timing is timing, f"benchmarks/{name}.py rebinds `timing`"


def test_a_cuda_choice_is_read_from_the_right_so_its_path_may_hold_colons():
    assert cuda_choice("p=a:b/v.cubin:16:persistent", GRIDS) == ("p", "a:b/v.cubin", 16, "persistent")
    assert cuda_choice("v=x.cubin:8", GRIDS) == ("v", "x.cubin", 8, "auto")
    for bad in ("x.cubin:16", "v=x.cubin", "v=x.cubin:16:wide", "v=:16"):
        with pytest.raises(SystemExit, match="expected LABEL=CUBIN:COLUMNS"):
            cuda_choice(bad, GRIDS)


def test_the_sweep_gives_memcheck_every_window_and_each_axis_on_short_and_long_windows():
    """benchmarks/gpu_sweep.py runs on the GPU under compute-sanitizer; what it feeds the kernel is decided
    here, without one: every window the CUDA kernel takes once, and each value of the other axes (index
    dtype, conv dtype, track, a batch past a warp's lanes) on windows of at most 16 and of more, with valid
    rows (a distinct slot, 1..N accepted, the first row all N, a track slot free and at an accepted step)."""
    from benchmarks import gpu_sweep
    from replayssm_overlay.kernels import cuda_fold

    configs = gpu_sweep.sweep_configs()
    assert [c["N"] for c in configs] == list(range(1, cuda_fold.MAX_WINDOW + 1))
    axes = {
        "int64 indices": lambda c: c["wide"],
        "fp32 conv": lambda c: c["conv_fp32"],
        "track slot": lambda c: bool(c["track"]),
        "past 32 rows": lambda c: len(c["slots"]) > 32,
    }
    for axis, value_of in axes.items():
        for long_windows in (False, True):
            seen = {value_of(c) for c in configs if (c["N"] > 16) == long_windows}
            assert seen == {False, True}, (axis, long_windows, seen)
    for c in configs:
        assert c["HV"] % c["H"] == 0 and c["V"] % (4 * cuda_fold.COLUMNS) == 0, c
        active = [s for s in c["slots"] if s >= 0]
        assert len(set(active)) == len(active) and all(s < c["num_slots"] for s in active)
        assert c["accept_lens"][0] == c["N"] and all(1 <= n <= c["N"] for n in c["accept_lens"])
        if c["track"]:
            track_slots, steps = c["track"]
            for row, (slot, step) in enumerate(zip(track_slots, steps)):
                assert slot == -1 or (slot not in active and 0 <= step < c["accept_lens"][row]), (c, row)
            assert any(s >= 0 for s in track_slots)
