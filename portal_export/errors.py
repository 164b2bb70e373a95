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


KEY_LEVEL_CODES = frozenset({"ERROR_WRONG_USER_KEY", "ERROR_KEY_DOES_NOT_EXIST", "IP_BANNED"})
TRANSIENT_CODES = frozenset({"ERROR_SERVER_ERROR", "ERROR_INTERNAL_SERVER_ERROR", "ERROR_PROXY_CONNECTION_FAILED"})
UNSOLVABLE_CODES = frozenset({"ERROR_CAPTCHA_UNSOLVABLE"})
NOT_READY = "CAPCHA_NOT_READY"  # sic: the service spells it so
ZERO_BALANCE = "ERROR_ZERO_BALANCE"  # busy threads or no plan: the client tells them apart


def classify(code: str, detail: str = "") -> ExportError:
    """The error for one of CaptchaAI's answer codes (ERROR_ZERO_BALANCE is diagnosed by the client)."""
    if code in KEY_LEVEL_CODES:
        return KeyLevelError(code, detail)
    if code in UNSOLVABLE_CODES:
        return UnsolvableError(code, detail)
    if code in TRANSIENT_CODES:
        return TransientError(code, detail)
    if code.startswith("ERROR_"):
        return PermanentError(code, detail)
    # HTML pages (HTTP_<status>) and anything unrecognizable: the service may be mid-deploy
    return TransientError(code, detail)


class LoginRefused(KeyLevelError):
    """The portal showed its login form again after the login post: key-level, as it concerns every
    task that shares the login (it trips a breaker of its own)."""

    CODE = "PORTAL_LOGIN_REFUSED"
