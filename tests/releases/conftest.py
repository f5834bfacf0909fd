"""Every supported SGLang release's real files: 0.5.19 is the venv's installed SGLang, the later ones are
installed by scripts/setup-venv.sh under <venv>/sglang-releases (harness.release_trees). A release that
is not there fails the test that needs it, naming `make setup`: these tests never skip a release."""

import pytest

from harness.errors import HarnessError
from harness.release_trees import release_tree


@pytest.fixture(scope="session")
def tree_of():
    def find(release: str):
        try:
            return release_tree(release)
        except HarnessError as error:
            pytest.fail(str(error))

    return find
