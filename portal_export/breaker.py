"""A key-level circuit breaker shared through the data dir's store: after a bad, banned or plan-less
key's first answer (repeated ones earn an IP ban), every client fails fast with its code, sending
nothing, until an operator clears it. Named by a fingerprint of the key, never the key."""

import hashlib
from typing import Any

from . import store_keys
from .errors import KeyLevelError
from .state import read_dict
from .store import Store, write_json

UNREADABLE = {"code": "BREAKER_OPEN", "detail": "unreadable breaker file"}  # a garbled breaker is open


def fingerprint(api_key: str) -> str:
    return hashlib.sha256(b"portal-export-breaker\0" + api_key.encode()).hexdigest()[:16]


class KeyBreaker:
    """`api_key` names what is refused: the key, or a login; `advice` is what the operator fixes."""

    def __init__(self, store: Store, api_key: str, advice: str = "fix the key or plan") -> None:
        self.store = store
        self.key = store_keys.breaker(fingerprint(api_key))
        self.advice = advice

    @property
    def location(self) -> str:
        return self.store.location(self.key)

    def check(self) -> None:
        if (state := read_dict(self.store, self.key, unreadable=UNREADABLE)) is not None:
            raise KeyLevelError(state.get("code", "BREAKER_OPEN"), self.opened(str(state.get("detail", ""))))

    def opened(self, detail: str) -> str:
        """Said alike by every host, so the hosts of one run send one alert."""
        return f"{detail} (breaker open: {self.advice}, then `make clear-breaker`)"

    def trip(self, code: str, detail: str = "") -> str:
        write_json(self.store, self.key, {"code": code, "detail": detail})
        return self.opened(detail)

    @staticmethod
    def _open(store: Store) -> dict[str, Any]:
        """Every open breaker's key and the code that tripped it (None when garbled: open, with no code to tell)."""
        return {key: (read_dict(store, key) or {}).get("code") for key in store.list(store_keys.BREAKERS)}

    @staticmethod
    def codes(store: Store) -> list[str]:
        return [str(code or "BREAKER_OPEN") for code in KeyBreaker._open(store).values()]

    @staticmethod
    def clear(store: Store) -> list[str]:
        """Remove every breaker; returns the codes that had tripped them."""
        found = KeyBreaker._open(store)
        for key in found:
            store.delete(key)
        return [str(code or "?") for code in found.values()]
