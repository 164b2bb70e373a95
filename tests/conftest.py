import os

import luigi
import luigi.configuration
import pytest

TEST_KEY = "testkey0123456789abcdef012345678"  # 32 characters, as CaptchaAI's keys


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    """Each test writes into its own data dir and sees only the environment it sets."""
    for name in ("CAPTCHAAI_API_KEY", "CAPTCHAAI_API_BASE", "PORTAL_BASE_URL", "LUIGI_CONFIG_PATH",
                 "SCHEDULER", "LUIGI_SCHEDULER_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PORTAL_DATA_DIR", str(tmp_path / "data"))
    luigi.task.Register.clear_instance_cache()
    yield
    luigi.task.Register.clear_instance_cache()


@pytest.fixture
def luigi_cfg():
    """Set luigi.cfg keys for one test: luigi_cfg(section, key, value); restored afterwards."""
    cfg = luigi.configuration.get_config()
    saved = []

    def set_(section, key, value):
        old = cfg.get(section, key, None)
        saved.append((section, key, old))
        if not cfg.has_section(section):
            cfg.add_section(section)
        cfg.set(section, key, str(value))
        luigi.task.Register.clear_instance_cache()

    yield set_
    for section, key, old in reversed(saved):
        if old is None:
            cfg.remove_option(section, key)
        else:
            cfg.set(section, key, old)
    luigi.task.Register.clear_instance_cache()


@pytest.fixture
def data_dir():
    from pathlib import Path
    return Path(os.environ["PORTAL_DATA_DIR"])
