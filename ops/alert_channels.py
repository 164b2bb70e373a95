"""Where alerts go: e-mail through Luigi's own sender ([email], [smtp] as Luigi documents them;
`format = none` or no receiver turns it off), and a webhook; `make alert-test`. Unlike Luigi's, an
alert is sent also from a terminal: a long backfill started there is often left alone."""

import contextlib
import functools
import html
import logging
import os
import socket
import warnings
from collections.abc import Callable, Iterator

import luigi.configuration
import luigi.notifications
import requests

from portal_export.alert_text import Summary
from tasks import config, targets
from tasks.secrets import say, scrub

WEBHOOK_CHANNEL = "webhook (ALERT_WEBHOOK_URL)"  # named by its variable: the URL is a secret


@contextlib.contextmanager
def config_set(section: str, key: str, value: str) -> Iterator[None]:
    """One key of this process's Luigi config, for the duration of the block."""
    cfg = luigi.configuration.get_config()
    old = cfg.get(section, key, None)
    if not cfg.has_section(section):
        cfg.add_section(section)
    cfg.set(section, key, value)
    try:
        yield
    finally:
        if old is None:
            cfg.remove_option(section, key)
        else:
            cfg.set(section, key, old)


@contextlib.contextmanager
def luigi_smtp_config() -> Iterator[None]:
    """Luigi warns about its own None defaults of [smtp] (username, password, ...) at every read."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Parameter .* is not of type string", category=UserWarning)
        yield


class ChannelError(Exception):
    """An alert channel did not take the message; the text names the failure, never the address."""


def post_webhook(url: str, timeout_s: float, subject: str, body: str) -> None:
    """POST {"text": ...} (Slack's shape). Errors name their kind only: the URL is a secret."""
    text = scrub(f"{subject}\n\n{body}" if body else subject)
    try:
        resp = requests.post(url, json={"text": text}, timeout=(timeout_s, timeout_s), allow_redirects=False)
    except requests.Timeout:
        raise ChannelError(f"no answer within {timeout_s:g} s") from None
    except requests.RequestException as err:
        raise ChannelError(f"could not connect ({type(err).__name__})") from None
    if not 200 <= resp.status_code < 300:
        raise ChannelError(f"answered HTTP {resp.status_code}")


def email_channel() -> str | None:
    mail = luigi.notifications.email()
    if not mail.receiver or mail.format == "none":
        return None
    if mail.method == "smtp":
        try:
            with luigi_smtp_config():
                smtp = luigi.notifications.smtp()
        except Exception:  # e.g. password = ${SMTP_PASSWORD} unset: sending says what is wrong
            return f"e-mail to {mail.receiver} (smtp)"
        return f"e-mail to {mail.receiver} (smtp {smtp.host}:{smtp.port or (465 if smtp.ssl else 25)})"
    return f"e-mail to {mail.receiver} ({mail.method})"


def send_email(subject: str, body: str) -> None:
    """Through Luigi's sender, which logs SMTP errors instead of raising them: those are caught here."""
    mail = luigi.notifications.email()
    message = f"<pre>{html.escape(body)}</pre>" if mail.format == "html" else body
    errors = []

    def catch(record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR:
            errors.append(record.getMessage())
            return False  # said once, as the channel's warning line
        return True

    logger = logging.getLogger("luigi-interface")
    logger.addFilter(catch)
    try:
        with config_set("email", "force_send", "true"), luigi_smtp_config():  # also from a terminal
            luigi.notifications.send_email(subject, message, mail.sender, [mail.receiver])
    except Exception as err:
        raise ChannelError(f"{type(err).__name__}: {err}") from None
    finally:
        logger.removeFilter(catch)
    if errors:
        raise ChannelError(errors[0])


def channels() -> list[tuple[str, Callable[[str, str], None]]]:
    """(name, send(subject, body)) of every configured channel."""
    found: list[tuple[str, Callable[[str, str], None]]] = []
    if name := email_channel():
        found.append((name, send_email))
    if url := os.environ.get("ALERT_WEBHOOK_URL", "").strip():
        found.append((WEBHOOK_CHANNEL, functools.partial(post_webhook, url, config.alerts().webhook_timeout_s)))
    return found


def deliver(summary: Summary, quiet: bool = False) -> dict[str, str | None]:
    """{channel: error or None}; a dead channel costs one warning line."""
    subject, body = scrub(summary.subject), scrub(summary.body)
    results: dict[str, str | None] = {}
    for name, send in channels():
        try:
            send(subject, body)
            results[name] = None
        except ChannelError as err:
            results[name] = scrub(str(err))
        if not quiet:
            error = results[name]
            say(f"alert sent by {name}" if error is None else f"warning: alert not delivered by {name}: {error}")
    return results


def alert_test() -> int:
    """`make alert-test`: one test message through every configured channel; 0 when all took it."""
    if not channels():
        say("alert-test: no channel configured: set [email] receiver (and [smtp]) or ALERT_WEBHOOK_URL")
        return 2
    host = socket.gethostname()
    summary = Summary(
        f"portal-export alert test from {host}",
        "A test message from `make alert-test`: a run that leaves days missing alerts here.\n\n"
        f"host {host}, data dir {targets.where()}",
        "warning",
    )
    results = deliver(summary, quiet=True)
    for name, error in results.items():
        say(f"alert-test: {name}: " + ("ok" if error is None else f"FAILED: {error}"))
    return 0 if all(error is None for error in results.values()) else 1
