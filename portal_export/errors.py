"""The error classes every failure falls into, and the map from CaptchaAI's answers to them.
Messages carry a code and a short detail, never a body, a URL with a query or the key."""


class ExportError(Exception):
    """Base of every error the export raises on purpose; `code` names the cause."""

    def __init__(self, code: str, detail: str = "") -> None:
        self.code = code
        self.detail = detail
        super().__init__(f"{code}: {detail}" if detail else code)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code!r})"


class PermanentError(ExportError):
    """Retrying cannot help (bad parameters, a page without sitekey, ...): fail once."""


class KeyLevelError(PermanentError):
    """The key itself is refused (bad, unknown, banned, no plan): every task is concerned."""


class TransientError(ExportError):
    """Server errors, busy threads, network, poll deadline: worth a fresh attempt after a wait."""


class BusyThreads(TransientError):
    """Every plan thread is busy: the submit made no task. A client with a gate waits instead of raising."""


class TokenRefused(TransientError):
    """The portal refused a solved token; the task is reported bad and the region tried afresh."""


class UnsolvableError(ExportError):
    """CaptchaAI gave up on the task; worth one fresh resubmission, then the region is counted."""


NOT_READY = "CAPCHA_NOT_READY"  # sic: the service spells it so
ZERO_BALANCE = "ERROR_ZERO_BALANCE"  # busy threads or no plan: the client tells them apart
NO_SLOT = "ERROR_NO_SLOT_AVAILABLE"  # every thread busy, in CaptchaAI's own guides

# Every code of CaptchaAI's submit (in.php) and result (res.php) error tables, by class; docs/failures.md lists
# each with the action taken. Busy codes are the client's to wait out (`BusyThreads`); the image codes answer
# only image tasks, listed so that no documented code falls to the catch-all unexamined.
KEY_LEVEL = "key-level"  # the key (or this host's use of it) is refused: a breaker stops every task
PERMANENT = "permanent"  # the request or the task cannot be mended by sending it again
TRANSIENT = "transient"  # the service failed on its side: sent again, then retried with backoff
UNSOLVABLE = "unsolvable"  # the workers gave up: one fresh resubmission
BUSY = "busy"  # no free thread: waited out, no attempt spent
CODES: dict[str, str] = {
    "ERROR_WRONG_USER_KEY": KEY_LEVEL,
    "ERROR_KEY_DOES_NOT_EXIST": KEY_LEVEL,
    "IP_BANNED": KEY_LEVEL,
    "ERROR_IP_NOT_ALLOWED": KEY_LEVEL,
    ZERO_BALANCE: BUSY,
    NO_SLOT: BUSY,
    "ERROR_PAGEURL": PERMANENT,
    "ERROR_GOOGLEKEY": PERMANENT,
    "ERROR_WRONG_GOOGLEKEY": PERMANENT,
    "ERROR_BAD_TOKEN_OR_PAGEURL": PERMANENT,
    "ERROR_BAD_PARAMETERS": PERMANENT,
    "ERROR_BAD_PROXY": PERMANENT,
    "ERROR_ZERO_CAPTCHA_FILESIZE": PERMANENT,
    "ERROR_TOO_BIG_CAPTCHA_FILESIZE": PERMANENT,
    "ERROR_WRONG_FILE_EXTENSION": PERMANENT,
    "ERROR_IMAGE_TYPE_NOT_SUPPORTED": PERMANENT,
    "ERROR_UPLOAD": PERMANENT,
    "ERROR_EMPTY_ACTION": PERMANENT,
    "ERROR_WRONG_ID_FORMAT": PERMANENT,
    "ERROR_WRONG_CAPTCHA_ID": PERMANENT,
    "ERROR_SERVER_ERROR": TRANSIENT,
    "ERROR_INTERNAL_SERVER_ERROR": TRANSIENT,
    "ERROR_PROXY_CONNECTION_FAILED": TRANSIENT,
    "ERROR_CAPTCHA_UNSOLVABLE": UNSOLVABLE,
    "ERROR_BAD_DUPLICATES": UNSOLVABLE,
}
_CLASS: dict[str, type[ExportError]] = {
    KEY_LEVEL: KeyLevelError,
    PERMANENT: PermanentError,
    TRANSIENT: TransientError,
    UNSOLVABLE: UnsolvableError,
    BUSY: BusyThreads,
}


def classify(code: str, detail: str = "") -> ExportError:
    """The error for one of CaptchaAI's answer codes (ERROR_ZERO_BALANCE is diagnosed by the client)."""
    if code in CODES:
        return _CLASS[CODES[code]](code, detail)
    if code.startswith("ERROR_"):  # undocumented: nothing says sending it again would help
        return PermanentError(code, detail)
    # HTML pages (HTTP_<status>) and anything unrecognizable: the service may be mid-deploy
    return TransientError(code, detail)


class LoginRefused(KeyLevelError):
    """The portal showed its login form again after the login post: key-level, as it concerns every
    task that shares the login (it trips a breaker of its own)."""

    CODE = "PORTAL_LOGIN_REFUSED"
