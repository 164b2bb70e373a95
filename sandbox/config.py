"""Sandbox settings: accounts, solve-time model, faults. Immutable; Sandbox.configure swaps a copy."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

SANDBOX_KEY = "5a4db0c0ffee5a4db0c0ffee5a4db0c0"  # 32 chars, account with an active plan
NO_PLAN_KEY = "0dead0beef0dead0beef0dead0beef00"  # 32 chars, account whose plan expired

ENDPOINTS = ("in.php", "res.php", "portal_get", "portal_post")
CAPTCHAAI_KINDS = ("html500", "html502", "plaintext", "server_error", "internal_error", "reset", "slow")
# HTTP 429 with Retry-After in seconds, with an HTTP date, or none; 503 with Retry-After in seconds
RATE_LIMIT_KINDS = ("rate_limit", "rate_limit_date", "rate_limit_bare", "unavailable")
ANSWER_CODE = re.compile(r"[A-Z][A-Z0-9_]*")  # a kind spelled as a code (ERROR_BAD_PROXY): CaptchaAI answers it
SOLVE_MODELS = ("fixed", "uniform", "lognormal")
HOST = "127.0.0.1"  # loopback only, never another interface
SANDBOX_USER = "export-bot@partner.example"
SANDBOX_PASSWORD = "s3cret-Pässwörd-0815"

# What real portals do differently, per region (SandboxConfig.variants); see portal_pages.py.
VARIANTS = (
    "csrf",  # a hidden CSRF token bound to the session
    "action",  # the form posts to /reports/run with view state (hidden, select, textarea, checkbox) to send back
    "get",  # the form's method is GET (to /export/run)
    "invisible",  # data-size="invisible": the task must say invisible=1
    "enterprise",  # the page loads recaptcha/enterprise.js: the task must say enterprise=1
    "data-s",  # a data-s attribute per page: the task must carry it
    "anchor",  # no data-sitekey: only reCAPTCHA's anchor iframe with k=
    "render",  # no data-sitekey: grecaptcha.render(...) in an inline script
    "frame",  # the export page frames the form (/export/form), beside a third-party frame
    "csv",  # the answer is text/csv
    "csv-attachment",  # the answer is an octet-stream attachment named *.csv
    "list",  # the answer is a bare JSON list
    "maintenance",  # the first maintenance_pages posts answer a 200 HTML maintenance page
    "login",  # the export page needs a logged-in session (else: redirect to /login)
)


# The portal's shape: the contract's simplest portal (/export, its variants per region), or a portal of
# its own shape (sandbox/daily_report.py: /reports/daily, a date field, a select of market codes).
SHAPES = ("simple", "daily-report")


@dataclass(frozen=True)
class FaultPlan:
    """Faults for one endpoint: seeded `rate` picking from `kinds`, plus a
    deterministic `schedule` {request index: kind} that wins over the rate.
    Indexes count requests to the endpoint since the plan was installed."""

    rate: float = 0.0
    kinds: tuple = CAPTCHAAI_KINDS
    schedule: dict = field(default_factory=dict)
    slow_s: float = 5.0
    retry_after_s: float = 2.0  # of the rate-limit kinds (whole seconds, at least 1, after time_scale)
    actions: tuple = ()  # res.php actions the plan counts and faults ("get": the polls); empty: every request

    def __post_init__(self):
        object.__setattr__(self, "kinds", tuple(self.kinds))
        object.__setattr__(self, "actions", tuple(self.actions))
        object.__setattr__(self, "schedule", {int(i): k for i, k in self.schedule.items()})
        if not 0.0 <= self.rate <= 1.0:
            raise ValueError(f"fault rate must be within [0, 1], got {self.rate}")
        kinds = set(self.kinds) | set(self.schedule.values())
        unknown = {k for k in kinds - set(CAPTCHAAI_KINDS + RATE_LIMIT_KINDS) if not ANSWER_CODE.fullmatch(k)}
        if unknown:
            raise ValueError(f"unknown fault kind(s): {sorted(unknown)}")
        if self.rate > 0 and not self.kinds:
            raise ValueError("a fault rate needs at least one kind")


@dataclass(frozen=True)
class SandboxConfig:
    seed: int = 1
    time_scale: float = 1.0  # multiplies every sandbox duration
    solve: str = "fixed"
    solve_s: float = 20.0
    solve_min_s: float = 5.0
    solve_max_s: float = 30.0
    solve_median_s: float = 15.0
    solve_sigma: float = 0.5
    threads: int = 5
    unsolvable_sitekeys: frozenset = frozenset()  # sitekeys or region names
    unsolvable_rate: float = 0.0
    token_validity_s: float = 120.0
    ban_after: int = 10
    ban_s: float = 300.0
    faults: dict = field(default_factory=dict)  # endpoint -> FaultPlan
    records_per_region: tuple = (3, 12)
    answer_bytes: dict = field(default_factory=dict)  # region -> size: an answer that big, made as it is sent
    valid_keys: frozenset = frozenset({SANDBOX_KEY})
    no_plan_keys: frozenset = frozenset({NO_PLAN_KEY})
    balance: float = 12.345
    captchaai_port: int = 0
    portal_port: int = 0
    variants: dict = field(default_factory=dict)  # region (or "*" for every one) -> variant names
    shape: str = "simple"  # one of SHAPES
    maintenance_pages: int = 2  # per (day, region), with the "maintenance" variant
    users: dict = field(default_factory=lambda: {SANDBOX_USER: SANDBOX_PASSWORD})

    def variants_of(self, region: str) -> frozenset:
        return frozenset(self.variants.get("*", ())) | frozenset(self.variants.get(region, ()))

    def __post_init__(self):
        for name in ("unsolvable_sitekeys", "valid_keys", "no_plan_keys"):
            object.__setattr__(self, name, frozenset(getattr(self, name)))
        object.__setattr__(self, "variants", {r: frozenset(v) for r, v in self.variants.items()})
        unknown_variants = set().union(*self.variants.values()) - set(VARIANTS) if self.variants else set()
        if unknown_variants:
            raise ValueError(f"unknown variant(s) {sorted(unknown_variants)}; variants are {VARIANTS}")
        if self.shape not in SHAPES:
            raise ValueError(f"shape must be one of {SHAPES}, got {self.shape!r}")
        if self.solve not in SOLVE_MODELS:
            raise ValueError(f"solve must be one of {SOLVE_MODELS}, got {self.solve!r}")
        if self.time_scale <= 0:
            raise ValueError("time_scale must be > 0")
        if self.threads < 0:
            raise ValueError("threads must be >= 0")
        unknown = set(self.faults) - set(ENDPOINTS)
        if unknown:
            raise ValueError(f"unknown fault endpoint(s) {sorted(unknown)}; use {ENDPOINTS}")
        if any(not isinstance(p, FaultPlan) for p in self.faults.values()):
            raise TypeError("faults values must be FaultPlan instances")
        lo, hi = self.records_per_region
        if not 0 <= lo <= hi:
            raise ValueError("records_per_region must be (lo, hi) with 0 <= lo <= hi")
