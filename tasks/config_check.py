"""The configuration checked whole before any request (ops/cli.py, at every command's start): every key of the
project's sections is one that tasks/config.py defines, every value one that can work; else one line. The keys
are read off the `luigi.Config` classes themselves, so a parameter added there is known here at once.

Luigi itself only warns of a key no parameter consumes (UnconsumedParameterWarning), and only once the class is
instantiated: a typo then runs as if the key were absent. Refused here first, that warning never comes."""

import configparser
import difflib
import os
from collections.abc import Callable, Iterator

import luigi
import luigi.configuration
from luigi.configuration.cfg_parser import LuigiConfigParser

from . import config
from .config import ConfigError
from .portal_shape import portal_shape

# Values that parse but cannot work: (section, key) -> (test of the parsed value, what to give instead)
BOUNDS: dict[tuple[str, str], tuple[Callable[[float], bool], str]] = {}
for _key in ("timeout_s", "http_timeout_s", "poll_every_s", "plan_every_s"):
    BOUNDS["captchaai", _key] = (lambda v: v > 0, "a positive number of seconds")
BOUNDS["captchaai", "first_poll_s"] = (lambda v: v >= 0, "0 or more seconds")
BOUNDS["captchaai", "spare_threads"] = (lambda v: v >= 0, "0 or more threads")
BOUNDS["portal", "attempts"] = (lambda v: v >= 1, "at least 1 (the first attempt counts)")
for _key in ("retry_base_s", "retry_jitter_s", "store_retry_s"):
    BOUNDS["portal", _key] = (lambda v: v >= 0, "0 or more seconds")
BOUNDS["portal", "max_unsolvable_ratio"] = (lambda v: 0 <= v <= 1, "a ratio from 0 to 1")
BOUNDS["portal", "heal_after_hours"] = (lambda v: v >= 0, "0 or more hours")
BOUNDS["portal", "keep_state_days"] = (lambda v: v > 0, "a positive number of days")
BOUNDS["portal", "metrics_window_days"] = (lambda v: v >= 1, "at least 1 day")
BOUNDS["alerts", "p95_warn_s"] = (lambda v: v >= 0, "0 or more seconds")
BOUNDS["alerts", "webhook_timeout_s"] = (lambda v: v > 0, "a positive number of seconds")
KINDS = {luigi.IntParameter: "a whole number", luigi.FloatParameter: "a number", luigi.BoolParameter: "true or false"}


def sections() -> dict[str, type[luigi.Config]]:
    """The project's sections: every `luigi.Config` class of tasks/config.py, by its section name."""
    classes = [v for v in vars(config).values() if isinstance(v, type) and issubclass(v, luigi.Config)]
    return {cls.get_task_family(): cls for cls in classes if cls.__module__ == config.__name__}


def defined(cls: type[luigi.Config]) -> dict[str, luigi.Parameter]:
    return dict(cls.get_params())


def files() -> list[str]:
    """The config files Luigi reads, in the order it layers them (a later one wins): its own paths, luigi.cfg of
    the current directory, then LUIGI_CONFIG_PATH's."""
    return [path for path in LuigiConfigParser._config_paths if os.path.isfile(path)]


def origins() -> dict[tuple[str, str], str]:
    """(section, key as written) -> the file that sets it last, as Luigi layers them."""
    found: dict[tuple[str, str], str] = {}
    for path in files():
        one = configparser.ConfigParser(interpolation=None, strict=False)
        one.optionxform = str  # type: ignore[assignment,method-assign]  # keys as Luigi reads them: case kept
        try:
            one.read(path)
        except configparser.Error:  # Luigi read it (or refused it) already; what it took is what counts
            continue
        for section in one.sections():
            for key in one[section]:
                if key not in one.defaults():
                    found[section, key] = path
    return found


def shown_path(path: str) -> str:
    """A config file as a line names it: relative to the current directory when under it."""
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def written(section: str) -> Iterator[str]:
    """The keys `section` sets in the layered config, as written (without [DEFAULT]'s)."""
    cfg = luigi.configuration.get_config()
    if cfg.has_section(section):
        yield from (key for key in cfg.options(section) if key not in cfg.defaults())


def unknown_key(section: str, key: str, known: list[str], where: str | None) -> ConfigError:
    near = difflib.get_close_matches(key.lower().replace("-", "_"), known, n=1, cutoff=0.6)
    hint = f"did you mean {near[0]}?" if near else f"the keys it takes: {', '.join(sorted(known))}"
    place = f" (in {shown_path(where)})" if where else ""
    return ConfigError(f"[{section}] {key}{place} is not a key the project defines: {hint}")


def parsed(section: str, key: str, param: luigi.Parameter) -> object:
    """The key's value as its parameter reads it; ConfigError for one it cannot read."""
    cfg = luigi.configuration.get_config()
    try:
        raw = cfg.get(section, key)
    except configparser.InterpolationSyntaxError as err:  # a % that interpolation cannot read
        raise config.interpolation_refused(err) from None
    except configparser.Error as err:  # ${VAR} of an unset variable
        raise ConfigError(f"[{section}] {key}: {err.message.splitlines()[0]}") from None
    try:
        value = param.parse(raw)
    except (ValueError, TypeError):
        kind = next((what for cls, what in KINDS.items() if isinstance(param, cls)), "another value")
        raise ConfigError(f"[{section}] {key} = {raw!r}: give {kind}") from None
    return value


def check_section(section: str, cls: type[luigi.Config], where: dict[tuple[str, str], str]) -> None:
    params = defined(cls)
    for key in written(section):
        # a dashed key too: Luigi reads it only where no file sets the underscored one, and luigi.cfg sets them all
        if key not in params:
            raise unknown_key(section, key, list(params), where.get((section, key)))
        value = parsed(section, key, params[key])
        test, give = BOUNDS.get((section, key), (None, ""))
        if test is not None and isinstance(value, int | float) and not test(value):
            raise ConfigError(f"[{section}] {key} = {value}: give {give}")


def check() -> None:
    """Refuse, in one ConfigError, the first key or value of the configuration that cannot work."""
    layered = os.environ.get("LUIGI_CONFIG_PATH", "")
    if layered and not os.path.isfile(layered):
        raise ConfigError(f"LUIGI_CONFIG_PATH={layered}: no such file")
    where = origins()
    for section, cls in sections().items():
        check_section(section, cls, where)
    cfg = luigi.configuration.get_config()
    try:
        cap = cfg.getint("resources", config.RESOURCE, 1)
    except ValueError:
        raise ConfigError(f"[resources] {config.RESOURCE}: give a whole number of solves") from None
    if cap < 1:
        raise ConfigError(f"[resources] {config.RESOURCE} = {cap}: give at least 1 solve in flight")
    portal_shape(with_login=False)  # [portal] regions and the portal's shape: its templates parsed once
