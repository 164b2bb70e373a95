"""luigi.cfg's sections (luigi.cfg, then LUIGI_CONFIG_PATH), the environment winning over both. The API key is no
parameter: read from the environment where a request needs it, it reaches no scheduler, visualiser or task id."""

import configparser
import os
import re

import luigi
import luigi.configuration

from portal_export.captchaai import DEFAULT_API_BASE
from portal_export.portal.shape import DEFAULT_PAGE

REGION_NAME = re.compile(r"[A-Za-z0-9_-]+")  # a region names a file and a URL parameter: nothing else
RESOURCE = "captchaai"  # the Luigi resource that caps solves in flight
RUN_STARTED = "PORTAL_EXPORT_RUN_STARTED"  # the CLI run's start, inherited by its tasks (health's seconds_below_cap)


def configured_cap() -> int:
    """[resources] captchaai: the ceiling, whatever the cap in force is now."""
    return int(luigi.configuration.get_config().getint("resources", RESOURCE, 1))


class captchaai(luigi.Config):
    api_base = luigi.Parameter(default=DEFAULT_API_BASE, description="the API's base URL (env CAPTCHAAI_API_BASE wins)")
    timeout_s = luigi.FloatParameter(default=120.0, description="deadline of one solve, counted from submit")
    first_poll_s = luigi.FloatParameter(default=15.0, description="wait before the first poll")
    poll_every_s = luigi.FloatParameter(default=5.0, description="wait between polls")
    http_timeout_s = luigi.FloatParameter(default=30.0, description="timeout of one HTTP call to the API")
    spare_threads = luigi.IntParameter(default=1, description="plan threads left for manual runs and timed-out tasks")
    follow_plan = luigi.BoolParameter(default=True, description="the cap in force follows what the live plan leaves")
    plan_every_s = luigi.FloatParameter(default=30.0, description="how often the plan is re-read while runs go")


class portal(luigi.Config):
    attempts = luigi.IntParameter(default=4, description="attempts per region for transient failures, first included")
    retry_base_s = luigi.FloatParameter(default=10.0, description="backoff base: base x (2^n - 1) before attempt n + 1")
    retry_jitter_s = luigi.FloatParameter(default=10.0, description="each backoff wait moves by up to +- this")
    base_url = luigi.Parameter(
        default="https://reports.partner.example", description="the portal's base URL (env PORTAL_BASE_URL wins)"
    )
    data_dir = luigi.Parameter(default="data", description="a path or s3://BUCKET/PREFIX (env PORTAL_DATA_DIR wins)")
    store_retry_s = luigi.FloatParameter(default=120.0, description="seconds an object store's outage is retried")
    regions = luigi.Parameter(
        default="north,south,east,west", description="comma-separated region names (letters, digits, - and _)"
    )
    max_unsolvable_ratio = luigi.FloatParameter(default=0.25, description="the day fails validation above this")
    heal_after_hours = luigi.FloatParameter(
        default=20.0, description="a failed day's unsolvable regions are solved again by the first run this long after"
    )
    keep_state_days = luigi.FloatParameter(
        default=30.0, description="days its own state, failure records and luigid history are kept after last use"
    )
    login_path = luigi.Parameter(default="/login", description="the login form's path (with PORTAL_USERNAME set)")
    export_page = luigi.Parameter(
        default=DEFAULT_PAGE, description="the export page's path and query under base_url, a template"
    )
    export_fields = luigi.Parameter(
        default="", description="comma-separated NAME=TEMPLATE: form fields the post sets, whatever the page gave"
    )
    region_values = luigi.Parameter(
        default="", description="comma-separated REGION=VALUE: what {region} stands for (default: the region's name)"
    )
    record_checks = luigi.Parameter(
        default="", description="comma-separated FIELD=TEMPLATE: the value every record of an answer must carry"
    )
    metrics_window_days = luigi.IntParameter(
        default=35, description="/metrics counts missing and failed days among this many days before today (UTC)"
    )


class alerts(luigi.Config):
    p95_warn_s = luigi.FloatParameter(default=60.0, description="a run whose days' p95 solve time is above this warns")
    webhook_timeout_s = luigi.FloatParameter(default=10.0, description="the alert webhook's connect and read timeout")


class ConfigError(ValueError):
    """A setting that cannot work; said in one line before any request leaves."""


def unreadable(err: ValueError) -> ConfigError | None:
    """The one line for a value luigi.cfg's interpolation refuses (a `%` not written `%%`: a strftime date pattern in
    a [portal] template, say), which Luigi raises as a ValueError from the section's parameters; None for another."""
    cause = err.__cause__
    return interpolation_refused(cause) if isinstance(cause, configparser.InterpolationError) else None


def interpolation_refused(cause: configparser.InterpolationError) -> ConfigError:
    why = " ".join(str(cause).split())
    return ConfigError(
        f"[{cause.section}] {cause.option}: {why} (a config file reads % as interpolation: write %% for one; "
        "a [portal] template writes the date with {day:DD.MM.YYYY}, not strftime's %d)"
    )


def api_key() -> str:
    key = os.environ.get("CAPTCHAAI_API_KEY", "").strip()
    if not key:
        raise ConfigError("CAPTCHAAI_API_KEY is not set: export it with your CaptchaAI account key")
    return key


def portal_base_url() -> str:
    return os.environ.get("PORTAL_BASE_URL") or portal().base_url


def data_dir_text() -> str:
    return (os.environ.get("PORTAL_DATA_DIR") or portal().data_dir).strip()


def check_region(name: object) -> str:
    if not isinstance(name, str) or not REGION_NAME.fullmatch(name):
        raise ConfigError(f"region {name!r}: use letters, digits, - and _ only")
    return name


def regions() -> list[str]:
    names = [r.strip() for r in portal().regions.split(",") if r.strip()]
    bad = [r for r in names if not REGION_NAME.fullmatch(r)]
    if bad or not names or len(set(names)) != len(names):
        raise ConfigError(
            f"[portal] regions = {portal().regions!r}: give distinct comma-separated names of letters, digits, - and _"
            + (f" ({', '.join(map(repr, bad))} is not one)" if bad else "")
        )
    return names
