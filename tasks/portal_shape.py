"""The partner's portal as the configuration describes it, built in one place: `[portal]`'s base URL and
shape keys (checked once, a mistake refused in one line) and the login from PORTAL_USERNAME /
PORTAL_PASSWORD, with a breaker named by base URL, user and password: a wrong password stops every run
after its first refusal (`make clear-breaker` clears it), and a corrected one is not blocked by the old one's."""

import os

from portal_export.breaker import KeyBreaker
from portal_export.portal import Login, PortalShape, ShapeError

from . import config, targets


def portal_login() -> Login | None:
    username = os.environ.get("PORTAL_USERNAME", "").strip()
    if not username:
        return None
    password = os.environ.get("PORTAL_PASSWORD", "")
    if not password:
        raise config.ConfigError("PORTAL_USERNAME is set but PORTAL_PASSWORD is not: export both, or neither")
    name = f"login\0{config.portal_base_url().rstrip('/')}\0{username}\0{password}"
    breaker = KeyBreaker(targets.store(), name, advice="fix PORTAL_USERNAME/PORTAL_PASSWORD")
    return Login(username, password, config.portal().login_path, breaker)


def portal_shape(with_login: bool = True) -> PortalShape:
    """The portal the exports speak to; ConfigError for a `[portal]` key that cannot work. `with_login=False`:
    the keys checked alone, nothing of the data dir touched."""
    cfg = config.portal()
    try:
        return PortalShape.from_settings(
            config.portal_base_url(),
            config.regions(),
            login=portal_login() if with_login else None,
            export_page=cfg.export_page,
            export_fields=cfg.export_fields,
            region_values=cfg.region_values,
            record_checks=cfg.record_checks,
        )
    except ShapeError as err:
        raise config.ConfigError(str(err)) from None
