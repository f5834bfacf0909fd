"""The SGLang releases the patcher knows: one table entry per release, holding the sha256 of every file
the overlay patches or relies on, as that release's wheel on PyPI ships it.

The patcher trusts file contents, not version strings. A tree is release X only when the three files it
patches (`TARGET_FILES`) hash to X's values; and it is patched only when the files whose behaviour the
runtime hooks rely on hash to X's values too (the "fingerprint": the mamba pool and its ReplaySSM flags,
the GDN backend whose verify writes the ring, the hybrid backend's verify metadata, `spec_utils` whose
MTP commit the ring releases reuse, the conv-scatter kernels, and the GDN ReplaySSM kernel files of that
release's protocol: 0.5.19's raw-window fold and the recurrence it clones, 0.5.20 on the circular ring).
Anything else is refused, naming the file that differs, unless `--allow-unverified` (recorded in the
manifest and said in every message).

This table is the one list of releases: the harness, `scripts/setup-venv.sh` and the help texts derive
theirs from it, and `tests/releases/test_release_coverage.py` fails for a release that is missing where it
must also appear (`docker/base.lock`, the kernel packages of `protocol.py`, the harness's release trees and
probes, every release range the documentation states). Adding a release is `RELEASING.md` at the
repository root, step by step (how to get the hashes, what to test).
"""

from replayssm_overlay.protocol import FLA_KERNELS, LINEAR_KERNELS, RING_MODULE

CONFIGURATOR = "srt/mem_cache/kv_cache_configurator.py"
DFLASH_WORKER = "srt/speculative/dflash_worker_v2.py"
DSPARK_WORKER = "srt/speculative/dspark_components/dspark_worker_v2.py"

#: The files the patcher edits, relative to the `sglang` package directory, in the order it edits them.
TARGET_FILES = (CONFIGURATOR, DFLASH_WORKER, DSPARK_WORKER)

# Files whose behaviour the hooks rely on (the fingerprint), besides the kernel files listed per release.
MAMBA_POOL = "srt/mem_cache/memory_pool.py"  # MambaPool's ReplaySSM flags, ring and cursors
GDN_BACKEND = "srt/layers/attention/linear/gdn_backend.py"  # the verify that writes the ring
HYBRID_BACKEND = "srt/layers/attention/hybrid_linear_attn_backend.py"  # verify metadata (physical slots)
SPEC_UTILS = "srt/speculative/spec_utils.py"  # the MTP commit the ring releases reuse
CONV_SCATTER = "kernels/ops/mamba/mamba_state_scatter_triton.py"  # the conv-window rollback
FLA = FLA_KERNELS + "/"  # GDN kernel folder up to 0.5.22
LINEAR = LINEAR_KERNELS + "/"  # and from 0.5.23 on

#: release -> {file relative to the `sglang` package: sha256 of the pristine file in that release's wheel}.
#: Every entry holds the three TARGET_FILES plus its fingerprint files.
RELEASE_FILES = {
    "0.5.19": {
        CONFIGURATOR: "40a4d40ba17dbd5065048a96077484b3158a26c00638a087c4678569597f5f04",
        DFLASH_WORKER: "75d064936b54db9062de80e9d1c2a25ae01d5fc69b0885e9c265b25c8ce3a399",
        DSPARK_WORKER: "22fdae3357126e547d50e75c68ebe08ab9a7d7317bd1c40f123c33de80775f35",
        MAMBA_POOL: "7955db1470ea36b99eb43483a5bd999dbda62119ff54aee7f9e8e01f31b2a9b5",
        GDN_BACKEND: "e422bf32703fffc99395d1b53b2d97aa50367f585ce98f8c4c04f0a845054db5",
        HYBRID_BACKEND: "d3fa4f08292c50c6a6a4b81acc19edb2dddd8b217a22a4389b65e12635a64886",
        SPEC_UTILS: "0ae9f760cb0ea32404599dbfe3ceeb758b1deca172d09a4507cf46ca23bd3048",
        CONV_SCATTER: "67681aefc281375e96ea48fd471b14a9b1594c6496d53c3bce3e5cc026537abc",
        FLA + "gdn_replayssm_spec_fold.py": "fb79ad9e12ec1e485cc65e12d6394debee69fb21a14c50e1bb84a809f6a46e28",
        FLA + "fused_sigmoid_gating_recurrent.py": "0cf7b4dbed432cec721c60b69629a4cb53d1600b865699f461da82618098b505",
    },
    "0.5.20": {
        CONFIGURATOR: "691bef2acb4a9dfbc815bac5d130723b1b0ec8b9cb45fd751d586b17a1b633a6",
        DFLASH_WORKER: "a157ea22c9ddab6a735e589c547ecc9b55e06b35f6cd6253495965a0f52ab969",
        DSPARK_WORKER: "fbcc306c07f46f59fd550c276b89497de573775ec66f34b7354447470f5be04c",
        MAMBA_POOL: "737ac340aee5a1d2a260fdf976c9023c563ca550ca1e2d47a3bbcfb674915577",
        GDN_BACKEND: "3bc3cf81319ad0cac2bf606d35d50d24f961d4a92b2a814ef502e531f7c76217",
        HYBRID_BACKEND: "59c07e19bc63f7300f5aea03cef348ad956cfa24cbcb79a7e274c479384e6e13",
        SPEC_UTILS: "f7b6db9995357dd99a221b763a642fda1a26b5ec21bc33cb7e350f2a5bcd6343",
        CONV_SCATTER: "e814dc1e68071c7c089734cc99eac0d1c00f8d00041d352f862e9dd2bd5775c5",
        FLA + "gdn_replayssm_spec_decode.py": "c0918028e7ed78a6b2f21e57854ccaede5c6f55538206085a1e6be2fc99e6d6c",
    },
    "0.5.21": {
        CONFIGURATOR: "27ea278a26c178e28b2af5a1bd14db8bae2d7bde6383cec4e6f3a5d8ca965623",
        DFLASH_WORKER: "99a44f45747a2cfc69423193cf8d2745c9a4ac320e3c200e37fe46395208f91f",
        DSPARK_WORKER: "18edcc9cc8f7258e4e206361c60201fb5bf1178b83e7f4fe046b1ad681cb17f1",
        MAMBA_POOL: "47e13954eb8b06836a5279fedd1f79f03dbd40245819ae152af3a02f3887c1ac",
        GDN_BACKEND: "c12e054cbe9f85cf15b0590a8ea7e3e175f62121160c3f548e0aa7ce71d1af0d",
        HYBRID_BACKEND: "8339a92ed5e4fd91f306f81f48d29c60f93a9e0e2ae4974cb6916f9f9a46f858",
        SPEC_UTILS: "58bd378c7444a7fdd6f0aa7b1ddf4b21e4ceb30553e5fc6a988709a46d7eb8fa",
        CONV_SCATTER: "0ebe3d57a1ca4f0ee8300961fb0df4484e39e9e98f0a9b2cee557b355ac96c87",
        FLA + "gdn_replayssm_spec_decode.py": "83358f6bcd0585a469e6ae545658f10fec7e6a8b3a4622ee9dc94efa0061c596",
    },
    "0.5.22": {
        CONFIGURATOR: "0e5b84cb28ef655c00c06a58e95e1c5c1b76047001d75a9265bef0fdbcd94a7b",
        DFLASH_WORKER: "6c3c85b2a3792905a85d41a0fb0a017ac894e2d503838ddd945f59fb1f2fafcf",
        DSPARK_WORKER: "e90fa94e106ea31e26d738c3364118f1f3418eab382f37b16a15fec9467113ac",
        MAMBA_POOL: "8251fab74646427510d9dc2a358668816c26c35d928c6817bf31fd6d7c8ed92c",
        GDN_BACKEND: "cbed4b7dc995bb7d4ca26381c1b707749a1eb3cf77983576c436723a31fb7ffb",
        HYBRID_BACKEND: "be138ae62064638c6801f1a90646b30553862f7bc8fc3ff72be354cbc937be44",
        SPEC_UTILS: "436a9774befc34bd91ed74e555c70388c1468b9cd7af2ccbba8fe020beb05bd9",
        CONV_SCATTER: "2428f4ca0e3bf809f75c9db07db77b1bec242326bb259149ab3e2e7c0d7f0d19",
        FLA + "gdn_replayssm_spec_decode.py": "83358f6bcd0585a469e6ae545658f10fec7e6a8b3a4622ee9dc94efa0061c596",
    },
    "0.5.23": {
        CONFIGURATOR: "1e31685151ea6ed110c2a659ea0ed975493d0eccf5295196567756bd5591887b",
        DFLASH_WORKER: "87a7f5808ea12bec0fb4abb8ffc0d2082963a79b5de9ab435063e0dfa8ce8431",
        DSPARK_WORKER: "5fe7eed599a012855e54b06e9256408379ca1ddc134b78e5a05284555d6861bc",
        MAMBA_POOL: "e077773e25c02be4dc597741e5f987375a221e595bccf92997dea684d5445a26",
        GDN_BACKEND: "04f4d78226b0c91e97fe5b1768ccba2719bcf1996faffb32e37ef580d66fab13",
        HYBRID_BACKEND: "e6f797a346bf7534026c963188e7383ec5eded10b94a75811ddb7867cc9980ef",
        SPEC_UTILS: "427bd9b723bda6a79761ff60964c01a35a781a8269d84bd26f581140deb0b27c",
        CONV_SCATTER: "47989f7434e7f7f06892fb7005306a003e49bf850916085775c56f12629b4784",
        LINEAR + "gdn_replayssm_spec_decode.py": "71a49ecdef3f598263a2681839ba03106f95dba7b0e6bdba3d0496c7da830bc6",
    },
}

#: The supported releases, oldest first (`docker/base.lock`'s RELEASES, which the image build and the CI
#: read, is held equal to it by tests/releases).
SUPPORTED_RELEASES = tuple(RELEASE_FILES)

#: The circular-ring releases (their fingerprint holds the GDN ring kernel module), oldest first; the others
#: keep 0.5.19's raw-window fold.
RING_RELEASES = tuple(
    release for release, files in RELEASE_FILES.items() if any(relpath.endswith("/" + RING_MODULE) for relpath in files)
)

#: release -> {target file: pristine sha256}: what identifies a release.
RELEASES = {release: {relpath: files[relpath] for relpath in TARGET_FILES} for release, files in RELEASE_FILES.items()}

#: release -> {fingerprint file: pristine sha256}: what the hooks rely on besides the patched files.
FINGERPRINTS = {
    release: {relpath: sha for relpath, sha in files.items() if relpath not in TARGET_FILES}
    for release, files in RELEASE_FILES.items()
}


def span(releases) -> str:
    """Releases as prose says them: "<oldest> to <newest>", or the one release."""
    return releases[0] if len(releases) == 1 else f"{releases[0]} to {releases[-1]}"


def version_key(release: str) -> tuple:
    """A release string as a sortable tuple ("0.5.24.dev3" sorts after "0.5.23")."""
    return tuple(int(part) if part.isdigit() else -1 for part in release.split("."))


def releases_with(relpath: str, sha256: str) -> set:
    """The known releases whose pristine `relpath` has this sha256 (empty if none)."""
    return {release for release, files in RELEASES.items() if files.get(relpath) == sha256}


def expected_hashes(relpath: str) -> dict:
    """release -> pristine sha256 of `relpath`, for every known release (for refusal messages)."""
    return {release: files[relpath] for release, files in RELEASES.items() if relpath in files}
