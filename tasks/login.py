"""The portal login from the environment (PORTAL_USERNAME / PORTAL_PASSWORD only), with its breaker,
named by base URL, user and password together: a wrong password stops every run after its first
refusal (`make clear-breaker` clears it), and a corrected one is not blocked by the old one's breaker."""

from __future__ import annotations

import os
from collections.abc import Callable

import requests

from portal_export.breaker import KeyBreaker
from portal_export.errors import TransientError
from portal_export.portal import Login
from portal_export.portal.session import log_in

from . import config, targets


def portal_login() -> Login | None:
    username = os.environ.get("PORTAL_USERNAME", "").strip()
    if not username:
        return None
    password = os.environ.get("PORTAL_PASSWORD", "")
    if not password:
        raise config.ConfigError("PORTAL_USERNAME is set but PORTAL_PASSWORD is not: export both, or neither")
    base_url = config.portal_base_url().rstrip("/")
    breaker = KeyBreaker(
        targets.store(), f"login\0{base_url}\0{username}\0{password}", advice="fix PORTAL_USERNAME/PORTAL_PASSWORD"
    )
    return Login(username, password, config.portal().login_path, breaker)


def check_login(timeout_s: float, say: Callable[[str], None]) -> None:
    """Log in once before a run, so a wrong password fails it before any captcha request leaves;
    a portal that is down now is no reason to refuse it (its tasks retry with backoff)."""
    login = portal_login()
    if login is None:
        return
    try:
        with requests.Session() as session:
            log_in(session, config.portal_base_url().rstrip("/"), login, timeout_s)
    except TransientError as err:
        say(f"warning: login check: {err}; the regions will try again")
