"""The repository speaks of the product, not of how it was made: no file points at a numbered issue or
working session, names who ran something, or reaches outside the repository for a tool (a decision in
`notes/decisions.md` or a test is what such a pointer becomes). Every tracked text file is read; the
control shows each pattern is found."""

import pathlib
import re
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]
NARRATION = re.compile(
    r"\bissues? #?\d+(?![\d.]| instructions)"  # "issue 37 item 4", "issues 13 and 36" (not the verb)
    r"|\bsessions? \d+"  # "session 16", "sessions 8-9"
    r"|\bthis round\b|\bthe lead\b|\bwe ran\b|\bin one sitting\b"
    r"|\.\./shared/",  # a tool outside the repository
    re.IGNORECASE,
)
THIS_FILE = pathlib.Path(__file__).resolve()


def tracked_text_files(root: pathlib.Path = ROOT) -> list:
    """The files git tracks (or, outside a checkout, every file but dot-folders), text only."""
    listed = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], capture_output=True)
    if listed.returncode == 0 and listed.stdout:
        files = [root / name for name in listed.stdout.decode().split("\0") if name]
    else:
        files = [f for f in root.rglob("*") if not any(part.startswith(".") for part in f.relative_to(root).parts)]
    texts = []
    for file in files:
        if file.is_file() and file.resolve() != THIS_FILE:
            data = file.read_bytes()
            if b"\0" not in data[:8192]:
                texts.append(file)
    return texts


def narration(files) -> list:
    """`path:line: text` for every line that narrates."""
    found = []
    for file in files:
        for number, line in enumerate(file.read_text(errors="replace").splitlines(), 1):
            if NARRATION.search(line):
                found.append(
                    f"{file.relative_to(ROOT) if file.is_relative_to(ROOT) else file}:{number}: {line.strip()}"
                )
    return found


def test_no_file_narrates_how_the_project_was_made():
    assert narration(tracked_text_files()) == []


def test_control_each_pattern_is_found(tmp_path):
    lines = [
        "as issue 37 item 4 found",
        "in sessions 16-20",
        "On an H100 (this round)",
        "what the lead runs",
        "bash ../shared/tools/triton-carry.sh",
        "the step loop issues 253 instructions",
        "Nsight: issue 0.74 a scheduler-cycle",
    ]
    file = tmp_path / "notes.md"
    file.write_text("\n".join(lines) + "\n")
    assert [hit.split(": ", 1)[1] for hit in narration([file])] == lines[:5]
