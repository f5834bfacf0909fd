"""Arguments the ahead-of-time tests share (a module, so tests can import it; conftest cannot be)."""

PROVIDER = "benchmarks.aot_sglang_fold:aot_specializations"
SHAPE_ARGS = ["--hv", "32", "--h", "16", "--k", "128", "--v", "128", "--tp", "1", "--window", "16"]


def build_args(out) -> list:
    """`kernels build` arguments for the two-specialization proof build into `out`."""
    return ["kernels", "build", "--out", str(out), "--provider", PROVIDER, *SHAPE_ARGS]
