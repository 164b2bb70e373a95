"""The system programs the tests run, from Debian packages that `make test` installs as root
(.ci/test-packages). Missing, a test fails as root (the install should have given it) and skips
otherwise, naming the package in one line."""

import os
import shutil

import pytest


def is_root() -> bool:
    return os.geteuid() == 0


def program(name: str, package: str) -> str:
    """The path of the system program `name`, of Debian's `package`."""
    found = shutil.which(name, path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin")
    if not found:
        message = f"{name} is missing: apt-get install {package}"
        if is_root():
            pytest.fail(message)
        pytest.skip(message)
    return found
