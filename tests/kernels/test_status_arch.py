"""`kernels status --arch 90` says the arch came from the argument, not from a GPU (never
"GPU sm_90" on a machine with none)."""

from replayssm_overlay.cli import main


def test_an_arch_given_on_the_command_line_is_not_called_a_gpu(tmp_path, capsys):
    assert main(["kernels", "status", "--dir", str(tmp_path), "--arch", "90"]) == 0
    node = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("node:"))
    assert node.endswith("checked as sm_90 (--arch; no GPU was asked)") and "GPU sm_90" not in node
