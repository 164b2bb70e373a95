"""Keeping the API key out of everything Luigi shows, logs or stores.

The client never puts the key anywhere but a POST body, so this is the second line: whatever some
library writes into a message or a traceback is scrubbed before it is logged or handed to Luigi
(whose `on_failure` text reaches luigid, /api/fetch_error and its state file).
"""

import logging
import os
import traceback

MASK = "***"


def scrub(text):
    key = os.environ.get("CAPTCHAAI_API_KEY", "").strip()
    return text.replace(key, MASK) if key and text else text


def format_failure(exception):
    """The failure text for Luigi: the error's code first (it is what the visualiser shows), then the traceback."""
    trace = "".join(traceback.format_exception(exception))
    return scrub(f"{exception}\n\n{trace}")


_factory = logging.getLogRecordFactory()


def _scrubbing_factory(*args, **kwargs):
    record = _factory(*args, **kwargs)
    message = record.getMessage()
    if scrub(message) != message:
        record.msg, record.args = scrub(message), ()
    if record.exc_info and record.exc_info[1] is not None:
        record.exc_text = scrub("".join(traceback.format_exception(*record.exc_info)).rstrip("\n"))
        record.exc_info = None
    return record


def install_log_scrubber():
    """Scrub every log record of the process, whoever logs it and whichever handler writes it."""
    if logging.getLogRecordFactory() is not _scrubbing_factory:
        logging.setLogRecordFactory(_scrubbing_factory)
