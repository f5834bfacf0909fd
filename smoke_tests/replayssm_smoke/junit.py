"""JUnit XML for CI and for Ansible's fetch: one test case per gate, an error case for exit 2."""

from __future__ import annotations

import xml.etree.ElementTree as ET


def render(report: dict) -> str:
    gates = report.get("gates", [])
    suite = ET.Element(
        "testsuite", name="replayssm-smoke", tests=str(max(1, len(gates))), time=f"{report.get('duration_s', 0.0):.3f}"
    )
    failures = errors = skipped = 0
    if report.get("error"):
        case = ET.SubElement(suite, "testcase", classname="replayssm_smoke", name="environment")
        err = ET.SubElement(case, "error", message=report["error"]["what"])
        err.text = str(report["error"].get("fix") or "")
        errors += 1
    for g in gates:
        case = ET.SubElement(suite, "testcase", classname="replayssm_smoke", name=g["name"])
        if g["passed"] is None:
            ET.SubElement(case, "skipped", message=g.get("detail", ""))
            skipped += 1
        elif not g["passed"]:
            fail = ET.SubElement(case, "failure", message=g.get("detail", "")[:500])
            fail.text = g.get("detail", "")
            failures += 1
        else:
            ET.SubElement(case, "system-out").text = g.get("detail", "")
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    suite.set("skipped", str(skipped))
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"
