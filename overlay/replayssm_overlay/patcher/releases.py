"""The SGLang releases the patcher knows, identified by the sha256 of each pristine target file.

The patcher trusts file contents, not version strings: a release is "known" only when all three target
files hash to the values below. To support another release, add one entry to `RELEASES` with the
sha256 of each file as it ships in that release's wheel, e.g.

    pip download --no-deps sglang==X.Y.Z -d /tmp/w
    python -c "import hashlib, sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); \
      [print(p, hashlib.sha256(z.read('sglang/' + p)).hexdigest()) for p in sys.argv[2:]]" \
      /tmp/w/sglang-X.Y.Z-*.whl <the three TARGET_FILES>

then check that the hook points are found (`replayssm-overlay apply --dry-run --sglang-dir ...`) and
that the runtime hooks in `hooks/` still match that release's code (`tests/hooks` and `tests/cycle` run
them against the installed SGLang).
"""

CONFIGURATOR = "srt/mem_cache/kv_cache_configurator.py"
DFLASH_WORKER = "srt/speculative/dflash_worker_v2.py"
DSPARK_WORKER = "srt/speculative/dspark_components/dspark_worker_v2.py"

#: The files the patcher edits, relative to the `sglang` package directory, in the order it edits them.
TARGET_FILES = (CONFIGURATOR, DFLASH_WORKER, DSPARK_WORKER)

#: release -> {target file: sha256 of the pristine file in that release's wheel from PyPI}.
RELEASES = {
    "0.5.19": {
        CONFIGURATOR: "40a4d40ba17dbd5065048a96077484b3158a26c00638a087c4678569597f5f04",
        DFLASH_WORKER: "75d064936b54db9062de80e9d1c2a25ae01d5fc69b0885e9c265b25c8ce3a399",
        DSPARK_WORKER: "22fdae3357126e547d50e75c68ebe08ab9a7d7317bd1c40f123c33de80775f35",
    },
}


def releases_with(relpath: str, sha256: str) -> set:
    """The known releases whose pristine `relpath` has this sha256 (empty if none)."""
    return {release for release, files in RELEASES.items() if files.get(relpath) == sha256}


def expected_hashes(relpath: str) -> dict:
    """release -> pristine sha256 of `relpath`, for every known release (for refusal messages)."""
    return {release: files[relpath] for release, files in RELEASES.items() if relpath in files}
