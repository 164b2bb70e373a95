"""`make config` (`python -m ops config`): the effective configuration, a line a value as `git config --show-origin`
prints it: where the value came from (`default`, `file:PATH`, `env:NAME`, `unset`), a tab, NAME=VALUE. Every key of
the project's sections and `[resources] captchaai`, then the environment's settings; secrets masked. A configuration
mistake is said after the listing (tasks/config_check.py), exit 2."""

import configparser
import os
from collections.abc import Callable, Iterator

import luigi
import luigi.configuration

from tasks import config, config_check
from tasks.secrets import SECRET_ENV, say

from . import luigid

# Keys an environment variable overrides (tasks/config.py, tasks/region.py)
ENV_BACKED = {
    ("captchaai", "api_base"): "CAPTCHAAI_API_BASE",
    ("portal", "base_url"): "PORTAL_BASE_URL",
    ("portal", "data_dir"): "PORTAL_DATA_DIR",
}
# Settings only the environment gives, with their defaults (docs/configuration.md)
ENV_ONLY = {"SCHEDULER": "auto", "LUIGI_SCHEDULER_URL": "http://127.0.0.1:8082", "PORTAL_USERNAME": ""}
MASKED = "********"  # the same whatever the secret: not even its length shows


def from_files(section: str, name: str, where: dict[tuple[str, str], str]) -> tuple[str, str] | None:
    """(origin, value) of a key the layered files set, or None."""
    if (section, name) not in where:
        return None
    try:
        value = str(luigi.configuration.get_config().get(section, name))
    except configparser.Error:  # an interpolation that fails: the check after the listing says so
        value = "?"
    return f"file:{config_check.shown_path(where[section, name])}", value


def section_lines(where: dict[tuple[str, str], str]) -> Iterator[tuple[str, str, str]]:
    for section, cls in config_check.sections().items():
        for name, param in config_check.defined(cls).items():
            variable = ENV_BACKED.get((section, name))
            if variable and os.environ.get(variable):
                yield f"env:{variable}", f"{section}.{name}", os.environ[variable]
            elif found := from_files(section, name, where):
                yield found[0], f"{section}.{name}", found[1]
            else:
                default = getattr(param, "_default", None)
                yield "default", f"{section}.{name}", "" if default is None else param.serialize(default)
    origin, value = from_files("resources", config.RESOURCE, where) or ("default", "1")  # luigid's default too
    yield origin, f"resources.{config.RESOURCE}", value


def env_lines() -> Iterator[tuple[str, str, str]]:
    for name, default in ENV_ONLY.items():
        value = os.environ.get(name, "")
        shown = luigid.shown(value) if name == "LUIGI_SCHEDULER_URL" else value
        yield (f"env:{name}", name, shown) if value else ("default", name, default)
    for name in SECRET_ENV:
        yield (f"env:{name}", name, MASKED) if os.environ.get(name, "").strip() else ("unset", name, "")


def cmd_config(show: Callable[[str], None]) -> int:
    where = config_check.origins()
    for origin, name, value in [*section_lines(where), *env_lines()]:
        show(f"{origin}\t{name}={value}")
    try:
        config_check.check()
    except config.ConfigError as err:
        say(f"error: {err}")
        return 2
    return 0
