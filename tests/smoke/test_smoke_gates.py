"""The smoke CLI against the stand-in server: clean passes, injected faults fail where they were injected."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

K = 4  # the injected output position


def test_clean_server_passes_every_gate(double, smoke, tmp_path):
    target, reference = double(), double(spec=False)
    code, doc, text = smoke("--target", target, "--reference", reference, "--max-new-tokens", "128")
    assert code == 0, text
    assert doc["passed"] is True and doc["exit_code"] == 0
    assert set(doc["acceptance"]) == {"code", "json", "math", "prose"}
    for stats in doc["acceptance"].values():
        assert stats["requests"] == 5 and stats["passed"] is True
        assert stats["p10"] <= stats["p50"] <= stats["p90"]
        assert 2.0 < stats["mean_accept_length"] < 4.0  # the double's mean 3.0, +-20% per prompt
    assert doc["exactness"]["teacher_forced"]["passed"] is True
    assert doc["exactness"]["teacher_forced"]["violations"] == []
    assert doc["exactness"]["teacher_forced"]["checked_tokens"] == 20 * 128
    parity = doc["exactness"]["parity"]
    assert parity["passed"] is True and parity["prompts_matching"] == 20
    assert all(v is None for v in parity["first_divergence"].values())
    assert doc["metrics_cross_check"]["passed"] is True
    assert (
        abs(
            doc["metrics_cross_check"]["accept_length_from_metrics"]
            - doc["acceptance_overall"]["token_weighted_accept_length"]
        )
        < 1e-9
    )
    suite = ET.parse(tmp_path / "out" / "junit.xml").getroot()
    assert suite.get("failures") == "0" and suite.get("errors") == "0"
    assert (tmp_path / "out" / "accept_length.svg").read_text().startswith("<svg")
    assert "PASS" in text


def test_wrong_token_fails_teacher_forced_and_parity_at_k(double, smoke):
    target, reference = double("--wrong-token-at", str(K)), double(spec=False)
    code, doc, text = smoke("--target", target, "--reference", reference, "--classes", "code,math")
    assert code == 1, text
    assert doc["passed"] is False
    tf = doc["exactness"]["teacher_forced"]
    assert tf["passed"] is False
    assert len(tf["violations"]) == 10
    assert {v["position"] for v in tf["violations"]} == {K}
    assert all(v["expected"] != v["got"] and v["margin"] > 1e-3 for v in tf["violations"])
    parity = doc["exactness"]["parity"]
    assert parity["passed"] is False
    for pid, div in parity["first_divergence"].items():
        assert div["position"] == K and div["tie"] is False, pid
    assert f"position {K}" in text


def test_injected_tie_is_reported_as_a_tie(double, smoke):
    target, reference = double("--tie-at", str(K)), double(spec=False)
    code, doc, text = smoke("--target", target, "--reference", reference, "--classes", "json")
    assert code == 0, text
    tf = doc["exactness"]["teacher_forced"]
    assert tf["passed"] is True and tf["violations"] == []
    assert [t["position"] for t in tf["ties"]] == [K] * 5
    assert doc["exactness"]["tie_margin"] == 0.125  # the built-in profile's: one bf16 step
    assert doc["exactness"]["tie_margin_source"] == "profile qwen3-next-gdn-dflash"
    parity = doc["exactness"]["parity"]
    assert parity["passed"] is True
    assert sorted(parity["diverged_at_tie"]) == [f"json-0{i}" for i in range(1, 6)]
    assert all(d["position"] == K and d["tie"] is True for d in parity["first_divergence"].values())


def test_tie_fails_parity_when_strict_and_when_margin_is_zero(double, smoke):
    target, reference = double("--tie-at", str(K)), double(spec=False)
    code, doc, _ = smoke("--target", target, "--reference", reference, "--classes", "json", "--strict-parity")
    assert code == 1 and doc["exactness"]["parity"]["passed"] is False
    assert doc["exactness"]["teacher_forced"]["passed"] is True
    code, doc, _ = smoke("--target", target, "--reference", reference, "--classes", "json", "--tie-margin", "0")
    assert code == 1 and doc["exactness"]["tie_margin_source"] == "--tie-margin"
    assert {v["position"] for v in doc["exactness"]["teacher_forced"]["violations"]} == {K}


def test_low_acceptance_fails_the_threshold(double, smoke):
    code, doc, text = smoke("--target", double("--accept-length", "1.2"), "--classes", "code,prose")
    assert code == 1, text
    assert doc["acceptance"]["code"]["passed"] is False
    assert doc["acceptance"]["code"]["mean_accept_length"] < 1.8
    failed = {g["name"] for g in doc["gates"] if g["passed"] is False}
    assert "acceptance.code" in failed
    assert doc["exactness"]["teacher_forced"]["passed"] is True  # slow is not lossy


def test_without_metrics_the_cross_check_is_skipped_not_failed(double, smoke):
    code, doc, _ = smoke("--target", double(metrics=False), "--classes", "math")
    assert code == 0
    cross = doc["metrics_cross_check"]
    assert cross["available"] is False and cross["passed"] is None
    assert "--enable-metrics" in cross["note"]
    assert doc["exactness"]["parity"]["passed"] is None  # nothing to compare with: skipped, not passed


def test_record_then_compare_with_golden(double, smoke, tmp_path):
    golden = tmp_path / "golden.json"
    code, _, text = smoke("--target", double(spec=False), "--record", str(golden), "--classes", "code")
    assert code == 0 and golden.exists(), text
    code, doc, text = smoke("--target", double(), "--golden", str(golden), "--classes", "code")
    assert code == 0, text
    assert doc["exactness"]["parity"]["against"] == "golden"
    assert doc["exactness"]["parity"]["prompts_matching"] == 5
    code, doc, _ = smoke("--target", double("--wrong-token-at", str(K)), "--golden", str(golden), "--classes", "code")
    assert code == 1
    assert {d["position"] for d in doc["exactness"]["parity"]["first_divergence"].values()} == {K}


def test_golden_from_other_prompts_is_an_environment_error(double, smoke, tmp_path):
    golden = tmp_path / "golden.json"
    assert smoke("--target", double(), "--record", str(golden), "--classes", "code")[0] == 0
    code, doc, text = smoke("--target", double(), "--golden", str(golden), "--classes", "code,json")
    assert code == 2 and "no recording for prompt 'json-01'" in text
    assert doc["passed"] is False


def test_slow_start_is_waited_for(double, smoke):
    url = double("--start-delay", "1")
    code, _, text = smoke("--target", url, "--classes", "prose", "--wait", "10")
    assert code == 0, text


def test_replayssm_off_is_noted_or_refused(double, smoke):
    url = double("--speculative-algorithm", "DFLASH", spec=False)  # speculation without ReplaySSM
    code, doc, _ = smoke("--target", url, "--classes", "prose")
    assert code == 0 and any("enable_linear_replayssm_spec" in n for n in doc["notes"])
    code, doc, text = smoke("--target", url, "--classes", "prose", "--require-replayssm")
    assert code == 2 and "does not run ReplaySSM spec-verify" in text


def test_speculative_reference_is_noted(double, smoke):
    code, doc, _ = smoke("--target", double(), "--reference", double(), "--classes", "prose")
    assert code == 0
    assert any("the reference ran with speculation" in n for n in doc["notes"])


def test_json_output_is_the_report(double, tmp_path, capsys):
    from replayssm_smoke import cli

    code = cli.main(
        ["--target", double(), "--classes", "code", "--max-new-tokens", "16", "--json", "-q", "--out", str(tmp_path)]
    )
    printed = json.loads(capsys.readouterr().out)
    assert code == 0 and printed["passed"] is True
    assert printed == json.loads((tmp_path / "report.json").read_text())


def test_profile_is_chosen_by_model(double, smoke):
    code, doc, _ = smoke("--target", double(), "--classes", "code")
    assert doc["thresholds"]["profile"] == "qwen3-next-gdn-dflash"
    assert "PLACEHOLDER" in doc["thresholds"]["how_measured"]
    code, doc, _ = smoke("--target", double("--model-path", "/models/Other-7B"), "--classes", "code")
    assert code == 0 and doc["thresholds"]["profile"] == "default"
