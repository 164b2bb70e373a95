import pytest

from tests.helpers.runs import Luigid


@pytest.fixture(scope="module")
def shared_central(tmp_path_factory):
    """One Luigid for a module's tests (each test uses days of its own, so task ids do not meet)."""
    server = Luigid(tmp_path_factory.mktemp("central"))
    yield server
    server.stop()
