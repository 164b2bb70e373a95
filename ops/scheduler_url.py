"""LUIGI_SCHEDULER_URL: checked, shown without its password, and probed. On a network luigid sits behind
an authenticating proxy whose credentials the URL carries (`https://USER:PASSWORD@HOST:PORT`), sent
as HTTP basic auth by Luigi's RPC client and the probe here."""

import contextlib
from urllib.parse import unquote, urlsplit

import requests

from tasks.secrets import MASK

REFUSED = (401, 403)  # the proxy's answers to missing or wrong credentials


def problem(url: str) -> str | None:
    """What is wrong with a scheduler URL, in a few words; None when it can be used."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises on a port that is not a number)
    except ValueError as err:
        return f"not a URL ({err})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "give http(s)://[USER:PASSWORD@]HOST:PORT"
    for what, value in (("user", parts.username), ("password", parts.password)):
        if value and not unquote(value).isascii():
            # refused far from here otherwise: no htpasswd entry made from UTF-8 matches it
            return f"the {what} must be ASCII (Luigi's HTTP client sends basic-auth credentials as Latin-1)"
    return None


def shown(url: str) -> str:
    """The URL as printed: its password masked, the user kept (which login a run uses)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return MASK
    user, at, host = parts.netloc.rpartition("@")
    if not at:
        return url
    name, colon, _ = user.partition(":")
    return parts._replace(netloc=f"{name}{':' + MASK if colon else ''}@{host}").geturl()


def bare(url: str) -> str:
    """The URL without its credentials: the visualiser's address (a browser asks for the login)."""
    parts = urlsplit(url)
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()


def answers(url: str) -> bool:
    """Whether anything answers HTTP at `url` (a scheduler, if it is one); a TLS failure is no answer."""
    with contextlib.suppress(requests.exceptions.SSLError):
        return status(url) is not None
    return False


def status(url: str) -> int | None:
    """The HTTP status answered at `url`, None when nothing answers; SSLError when TLS verification fails."""
    try:
        return requests.get(url, timeout=2, allow_redirects=False).status_code
    except requests.exceptions.SSLError:
        raise
    except requests.RequestException:
        return None
