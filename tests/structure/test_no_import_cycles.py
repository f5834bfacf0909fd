"""No import cycles in the overlay, the smoke suite or the harness: module-level and
function-level imports both count (`import_graph.py` says why), so a new cycle fails here whichever way it
is written. Three cycles the design once had (`kernels/commit_plan` -> `loader` -> `cuda_fold` -> `commit_plan`,
`harness/demo` <-> `ring_demo`, `harness/release_trees` <-> `sandbox`) are gone; the controls show the
walk sees a lazy import and a cycle through one."""

from tests.structure import import_graph


def test_the_overlay_the_smoke_suite_and_the_harness_have_no_import_cycle():
    edges = import_graph.graph()
    assert {"replayssm_overlay.fold", "replayssm_smoke.cli", "harness.demo"} <= set(edges)
    assert import_graph.cycles(edges) == []


def test_control_function_level_imports_are_edges():
    edges = import_graph.graph()
    assert "replayssm_overlay.kernels.loader" in edges["replayssm_overlay.fold"]  # imported inside _decide
    assert "harness.ring_demo" in edges["harness.demo"]  # imported inside main


def test_control_a_cycle_through_a_lazy_import_is_found(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from pkg import a\n")  # a package importing its child: no cycle
    (pkg / "a.py").write_text("from pkg import b\n")
    (pkg / "b.py").write_text("def late():\n    from . import c\n")
    (pkg / "c.py").write_text("from pkg.a import name\n")
    (pkg / "d.py").write_text("import pkg.a\n")
    edges = import_graph.graph({"pkg": tmp_path})
    assert edges["pkg.c"] == {"pkg.a"} and edges["pkg.d"] == {"pkg.a"}
    assert import_graph.cycles(edges) == [["pkg.a", "pkg.b", "pkg.c"]]


#: the probe's modules that import the overlay, each only where the probe asked for it (the patched copy)
PROBE_OVERLAY_IMPORTERS = {"harness.probe", "harness.cycle"}


def test_the_probes_modules_import_nothing_of_the_overlay_but_where_it_asks():
    """`python -m harness.probe` also runs where a test hides `replayssm_overlay` (stock behaviour,
    tests/hooks/test_overlay_unimportable.py: minutes): the harness modules it loads import nothing of the
    overlay, so that run cannot fail for an import the hidden package refuses."""
    known = import_graph.modules()
    loaded, todo = set(), ["harness.probe"]
    while todo:
        name = todo.pop()
        if name not in loaded and name.startswith("harness"):
            loaded.add(name)
            todo += [target for target in import_graph.imports_of(known[name], name) if target in known]
    importers = {
        name
        for name in loaded
        if any(target.startswith("replayssm_overlay") for target in import_graph.imports_of(known[name], name))
    }
    assert {"harness.cpu_redirects", "harness.gdn_kernels", "harness.recurrence"} <= loaded
    assert importers == PROBE_OVERLAY_IMPORTERS
