"""Keeping the secrets out of everything Luigi shows, logs or stores, behind the client's key-only-in-a-POST-body: what
a library writes into a message or traceback is scrubbed before it is logged or reaches luigid and its state file."""

import logging
import os
import re
import sys
import threading
import traceback
from typing import Any
from urllib.parse import unquote, urlsplit

import luigi.configuration

MASK = "***"
# From the environment only, masked wherever text leaves (`[smtp] password = ${SMTP_PASSWORD}`; AWS: boto3's own).
SECRET_ENV: tuple[str, ...] = ("CAPTCHAAI_API_KEY", "PORTAL_PASSWORD", "ALERT_WEBHOOK_URL", "SMTP_PASSWORD")
SECRET_ENV += ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
SECRET_S3_KEYS = ("aws_secret_access_key", "aws_session_token")  # Luigi's [s3] may hold them (read there first)


def secrets() -> list[str]:
    """The secret values set now, longest first (so a secret containing another is masked whole)."""
    values = {os.environ.get(name, "").strip() for name in SECRET_ENV}
    # A webhook URL's credential is its path and query (Slack's /services/T../B../XXX), which libraries show alone.
    webhook = urlsplit(os.environ.get("ALERT_WEBHOOK_URL", "").strip())
    tail = webhook.path + (f"?{webhook.query}" if webhook.query else "")
    values.add(tail if len(tail) >= 8 else "")  # too short to be one: none
    values.update(url_password(os.environ.get("LUIGI_SCHEDULER_URL", "").strip()))
    values |= {str(luigi.configuration.get_config().get("s3", key, "") or "").strip() for key in SECRET_S3_KEYS}
    return sorted((v for v in values if v), key=len, reverse=True)


def url_password(url: str) -> set[str]:
    """A URL's user-info password, as written and percent-decoded (Luigi prints the URL as given, requests prepared)."""
    netloc = re.split(r"[/?#]", url.partition("://")[2], maxsplit=1)[0]  # as urlsplit, which may raise
    user_info, at, _ = netloc.rpartition("@")
    password = user_info.partition(":")[2] if at else ""
    return {password, unquote(password)} if password else set()


def scrub(text: str) -> str:
    for value in secrets():
        text = text.replace(value, MASK)
    return text


def say(message: str) -> None:
    """A line for the operator, on stderr, scrubbed: what every command prints besides its answer."""
    print(scrub(message), file=sys.stderr, flush=True)


def format_failure(exception: BaseException) -> str:
    """The failure text for Luigi: the error's code first (it is what the visualiser shows), then the traceback."""
    trace = "".join(traceback.format_exception(exception))
    return scrub(f"{exception}\n\n{trace}")


_factory = logging.getLogRecordFactory()


def _scrubbing_factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
    record = _factory(*args, **kwargs)
    message = record.getMessage()
    if scrub(message) != message:
        record.msg, record.args = scrub(message), ()
    if record.exc_info and record.exc_info[1] is not None:
        record.exc_text = scrub("".join(traceback.format_exception(*record.exc_info)).rstrip("\n"))
        record.exc_info = None
    return record


def _scrubbing_excepthook(kind: type[BaseException], value: BaseException | None, tb: Any, head: str = "") -> None:
    sys.stderr.write(scrub(head + "".join(traceback.format_exception(kind, value, tb))))


def _scrubbing_thread_excepthook(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is not SystemExit:
        name = args.thread.name if args.thread else "?"
        _scrubbing_excepthook(args.exc_type, args.exc_value, args.exc_traceback, f"Exception in thread {name}:\n")


def install_log_scrubber() -> None:
    """Scrub every log record of the process, whoever logs it, and the tracebacks Python prints itself."""
    logging.setLogRecordFactory(_scrubbing_factory)
    sys.excepthook = _scrubbing_excepthook
    threading.excepthook = _scrubbing_thread_excepthook
