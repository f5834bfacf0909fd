"""benchmarks/timing.py's results folder (`Run`), which every GPU benchmark script writes through: it must
keep what a run measured up to the moment it is cut short (the device tool returns what is under $OUT when
a command runs past its limit). The CUDA timings beside it need a GPU and run only there."""

import json

from benchmarks import timing


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

    for name in ("gpu_commit", "gpu_run", "gpu_ring"):
        module = importlib.import_module(f"benchmarks.{name}")
        assert module.timing is timing, f"benchmarks/{name}.py rebinds `timing`"
