"""A key-level circuit breaker shared through a state directory.

A bad, unknown, banned or plan-less key concerns every task of every run, and repeated bad-key
requests earn an IP ban. After the first such answer, the breaker file makes every other client
that shares the directory fail fast with the original code, without sending anything, until an
operator clears it (or the key changes: the file is named by a fingerprint of the key, never the key).
"""

import hashlib
import json
import os
from pathlib import Path

from .atomic import write_json
from .errors import KeyLevelError


def fingerprint(api_key: str) -> str:
    return hashlib.sha256(b"portal-export-breaker\0" + api_key.encode()).hexdigest()[:16]


class KeyBreaker:
    """`api_key` names what is refused: the key, or a login (its URL, user and password together);
    `advice` is what the operator fixes before clearing it."""

    def __init__(self, state_dir: str | os.PathLike[str], api_key: str, advice: str = "fix the key or plan") -> None:
        self.dir = Path(state_dir)
        self.path = self.dir / f"breaker-{fingerprint(api_key)}.json"
        self.advice = advice

    def check(self) -> None:
        """Raise the code that tripped the breaker, if it has."""
        try:
            state = json.loads(self.path.read_text())
        except FileNotFoundError:
            return
        except ValueError:
            state = {"code": "BREAKER_OPEN", "detail": "unreadable breaker file"}
        raise KeyLevelError(
            state.get("code", "BREAKER_OPEN"),
            f"{state.get('detail', '')} (breaker open: {self.advice}, then `make clear-breaker`)",
        )

    def trip(self, code: str, detail: str = "") -> None:
        write_json(self.path, {"code": code, "detail": detail})

    @staticmethod
    def clear(state_dir: str | os.PathLike[str]) -> list[str]:
        """Remove every breaker file; returns the codes that had tripped them."""
        codes: list[str] = []
        for path in Path(state_dir).glob("breaker-*.json"):
            try:
                codes.append(json.loads(path.read_text()).get("code", "?"))
            except ValueError:
                codes.append("?")
            path.unlink(missing_ok=True)
        return codes
