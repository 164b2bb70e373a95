"""In-memory state shared by the CaptchaAI server and the portal (one lock guards it all)."""

from __future__ import annotations

import base64
import dataclasses
import math
import random
import secrets
import threading
import time
from collections import deque
from dataclasses import dataclass

from werkzeug.wrappers import Response

from .config import SandboxConfig
from .faults import FaultInjector, rate_limited
from .portal_data import region_of_sitekey, sitekey_for
from .stats import Stats, mask

NOT_READY = "CAPCHA_NOT_READY"  # sic: the real service spells it so
ZERO_BALANCE = "ERROR_ZERO_BALANCE"


@dataclass
class Task:
    id: str
    key: str
    googlekey: str
    pageurl: str
    submit_t: float
    ready_t: float
    unsolvable: bool
    polls: int = 0
    last_poll_t: float | None = None
    token: str | None = None
    token_used: bool = False
    token_posted_t: float | None = None
    accepted: bool = False
    reported_bad: bool = False
    reported_good: bool = False
    invisible: bool = False  # the widget kind the task was submitted for (invisible=1, enterprise=1, data-s)
    enterprise: bool = False
    data_s: str | None = None


@dataclass
class Served:
    """One export page served to a session, and what its form post must send back."""

    page_url: str
    action: str = "/export"  # the path the form posts to
    invisible: bool = False
    enterprise: bool = False
    data_s: str | None = None
    expect: dict = dataclasses.field(default_factory=dict)  # field -> the exact value it must come back with
    sitekey: str | None = None  # the site's one sitekey; None: the region's own


@dataclass
class Session:
    pages: dict = dataclasses.field(default_factory=dict)  # (day, region) -> Served
    logged_in: bool = False
    login_csrf: str | None = None


class SandboxState:
    def __init__(self, config: SandboxConfig):
        self.cfg = config
        self.lock = threading.RLock()
        self.stopping = threading.Event()  # wakes 'slow' faults on stop
        self._t0 = time.monotonic()
        self._paused_at: float | None = None  # the sandbox time the clock stands at, while paused
        seed = config.seed
        # one stream per purpose: e.g. adding a fault plan must not change solve times
        self._rng_solve = random.Random(f"{seed}|solve")
        self._rng_unsolvable = random.Random(f"{seed}|unsolvable")
        self._rng_token = random.Random(f"{seed}|token")
        self._next_id = random.Random(f"{seed}|ids").randrange(7 * 10**10, 8 * 10**10)
        self.faults = FaultInjector(config.faults, seed)
        self.tasks: dict[str, Task] = {}
        self._tokens: dict[str, str] = {}  # token -> task id
        self._holds: list[list] = []  # [start, end, key] per plan thread hold, for the timeline
        self._ambush: list | None = None  # [n, seconds, key, taken]: another consumer's threads, at a submit
        self._active: list[list] = []  # the holds not yet over, for the per-request checks
        self._others: list[list] = []  # other consumers' holds (occupy_threads), which release_threads ends
        self._sessions: dict[str, Session] = {}  # cookie -> what it was served, and its login
        self._maintenance: dict[tuple, int] = {}  # (day, region) -> maintenance pages answered
        self._bad_key_times: dict[str, deque] = {}  # ip -> times of bad-key requests
        self._banned_until: dict[str, float] = {}
        self._embargo: dict[tuple[str, str], float] = {}  # (endpoint, request) -> its Retry-After's end, time.time
        self.stats = Stats(epoch=0.0)

    # ── clock ────────────────────────────────────────────────────────────────
    def now(self) -> float:
        paused = self._paused_at
        return time.monotonic() - self._t0 if paused is None else paused

    def pause_clock(self) -> None:
        """Sandbox time stands still: no solve ends, no hold or token ages, until resume_clock()."""
        with self.lock:
            if self._paused_at is None:
                self._paused_at = self.now()

    def resume_clock(self) -> None:
        """Time goes on from where it stood: the pause lengthens every wait by its own length."""
        with self.lock:
            if self._paused_at is not None:
                self._t0 = time.monotonic() - self._paused_at
                self._paused_at = None

    def scaled(self, seconds: float) -> float:
        return seconds * self.cfg.time_scale

    def sleep(self, seconds: float) -> None:
        self.stopping.wait(seconds)

    # ── config ───────────────────────────────────────────────────────────────
    def configure(self, **changes) -> None:
        with self.lock:
            self.cfg = dataclasses.replace(self.cfg, **changes)
            if "faults" in changes:  # schedule indexes restart with the new plans
                self.faults = FaultInjector(self.cfg.faults, self.cfg.seed)

    # ── requests, faults, keys and bans ──────────────────────────────────────
    def note_request(self, endpoint: str, key_in_query: bool = False, action: str | None = None):
        with self.lock:
            self.stats.requests[endpoint] += 1
            self.stats.key_in_query += bool(key_in_query)
            if action is not None:
                self.stats.actions[action] += 1

    def pick_fault(self, endpoint: str, action: str | None = None):
        with self.lock:
            kind, plan = self.faults.pick(endpoint, action)
            if kind:
                self.stats.faults[endpoint][kind] += 1
            return kind, plan

    def rate_limit(self, endpoint: str, who: str, kind: str, plan) -> Response:
        """A rate limit's answer to request `who`; the same request before its end counts as early."""
        response, until = rate_limited(kind, self.scaled(plan.retry_after_s))
        with self.lock:
            self.stats.rate_limited[endpoint] += 1
            self._embargo[(endpoint, who)] = until
        return response

    def note_again(self, endpoint: str, who: str) -> None:
        """Request `who` arrives: early if a rate limit told it to wait longer."""
        with self.lock:
            if self._embargo.pop((endpoint, who), 0.0) > time.time():
                self.stats.early[endpoint] += 1

    def note_code(self, endpoint: str, code: str) -> None:
        with self.lock:
            self.stats.codes[endpoint][code] += 1

    def key_error(self, key) -> str | None:
        if not key or len(key) != 32:
            return "ERROR_WRONG_USER_KEY"
        if key not in self.cfg.valid_keys | self.cfg.no_plan_keys:
            return "ERROR_KEY_DOES_NOT_EXIST"
        return None

    def gate(self, ip: str, key) -> str | None:
        """IP_BANNED, a key error (counted toward the ban), or None to proceed."""
        with self.lock:
            now, cfg = self.now(), self.cfg
            if self._banned_until.get(ip, -1.0) > now:
                return "IP_BANNED"
            code = self.key_error(key)
            if code:
                self.stats.bad_key_requests += 1
                times = self._bad_key_times.setdefault(ip, deque())
                times.append(now)
                while times and times[0] < now - self.scaled(cfg.ban_s):
                    times.popleft()
                if cfg.ban_after > 0 and len(times) >= cfg.ban_after:
                    self._banned_until[ip] = now + self.scaled(cfg.ban_s)
                    self.stats.ip_bans += 1
                    times.clear()
            return code

    # ── plan threads ─────────────────────────────────────────────────────────
    def _hold(self, start: float, end: float, key: str) -> list:
        hold = [start, end, key]  # one list in both: release_threads ends it for the timeline too
        self._holds.append(hold)
        self._active.append(hold)
        return hold

    def _in_use(self, key: str, now: float) -> int:
        self._active = [h for h in self._active if h[1] > now]  # keeps long benchmarks linear
        return sum(1 for s, e, k in self._active if k == key and s <= now)

    def working_threads(self, key: str) -> int:
        with self.lock:
            return 0 if key in self.cfg.no_plan_keys else self._in_use(key, self.now())

    def occupy_threads(self, n: int, seconds: float, key: str) -> int:
        """Another consumer's tasks on the same key; only free threads can be taken."""
        with self.lock:
            now = self.now()
            taken = max(0, min(n, self.cfg.threads - self._in_use(key, now)))
            self._others = [h for h in self._others if h[1] > now]
            for _ in range(taken):
                self._others.append(self._hold(now, now + self.scaled(seconds), key))
            return taken

    def release_threads(self, key: str, n: int | None = None) -> int:
        """Another consumer's tasks on `key` end now (`n` of them, those due first; None: all);
        returns how many threads that freed."""
        with self.lock:
            now = self.now()
            held = sorted((h for h in self._others if h[2] == key and h[1] > now), key=lambda h: h[1])[:n]
            for hold in held:
                hold[1] = now
            self._others = [h for h in self._others if h[1] > now]
            return len(held)

    def occupy_at_next_submit(self, n: int, seconds: float, key: str, after: int = 0) -> None:
        """Another consumer takes the last n free threads just as a submit on `key` would use one of
        them (before it is answered), once `after` tasks exist."""
        with self.lock:
            self._ambush = [n, seconds, key, None, after]

    def ambushed(self) -> int | None:
        """How many threads the armed consumer took at its submit; None while it waits for one."""
        with self.lock:
            return None if self._ambush is None else self._ambush[3]

    def _ambush_due(self, key: str, now: float) -> bool:
        ambush = self._ambush
        if ambush is None or ambush[3] is not None or ambush[2] != key or len(self.tasks) < ambush[4]:
            return False
        return 0 < self.cfg.threads - self._in_use(key, now) <= ambush[0]

    # ── CaptchaAI tasks ──────────────────────────────────────────────────────
    def _draw_solve_s(self) -> float:
        cfg, rng = self.cfg, self._rng_solve
        if cfg.solve == "uniform":
            return rng.uniform(cfg.solve_min_s, cfg.solve_max_s)
        if cfg.solve == "lognormal":
            return rng.lognormvariate(math.log(cfg.solve_median_s), cfg.solve_sigma)
        return cfg.solve_s

    def submit(
        self, key: str, googlekey: str, pageurl: str, invisible=False, enterprise=False, data_s=None
    ) -> tuple[bool, str]:
        with self.lock:
            now, cfg = self.now(), self.cfg
            if self._ambush_due(key, now):
                assert self._ambush is not None
                self._ambush[3] = self.occupy_threads(self._ambush[0], self._ambush[1], key)
                now = self.now()  # its holds start now: count them
            if key in cfg.no_plan_keys or self._in_use(key, now) >= cfg.threads:
                return False, ZERO_BALANCE
            # draw both for every task so the streams stay aligned whatever the config
            solve_s = self.scaled(self._draw_solve_s())
            by_rate = self._rng_unsolvable.random() < cfg.unsolvable_rate
            marked = cfg.unsolvable_sitekeys
            task = Task(
                id=str(self._next_id),
                key=key,
                googlekey=googlekey,
                pageurl=pageurl,
                submit_t=now,
                ready_t=now + solve_s,
                unsolvable=by_rate or googlekey in marked or region_of_sitekey(googlekey) in marked,
                invisible=invisible,
                enterprise=enterprise,
                data_s=data_s,
            )
            self._next_id += 1
            self.tasks[task.id] = task
            self._hold(now, task.ready_t, key)  # held whether or not anyone polls
            self.stats.submits[mask(key)] += 1
            return True, task.id

    def _new_token(self) -> str:
        while True:
            raw = self._rng_token.randbytes(240)
            token = "03AFcWeA" + base64.urlsafe_b64encode(raw).decode().rstrip("=")
            if token not in self._tokens:
                return token

    def result(self, key: str, task_id: str) -> tuple[bool, str]:
        with self.lock:
            task = self.tasks.get(task_id)
            if task is None or task.key != key:
                return False, "ERROR_WRONG_CAPTCHA_ID"
            task.polls += 1
            task.last_poll_t = self.now()
            self.stats.polls[task_id] += 1
            if self.now() < task.ready_t:
                return False, NOT_READY
            if task.unsolvable:
                return False, "ERROR_CAPTCHA_UNSOLVABLE"
            if task.token is None:
                task.token = self._new_token()
                self._tokens[task.token] = task.id
                self.stats.tokens_issued += 1
            return True, task.token

    def report(self, key: str, task_id: str, bad: bool) -> tuple[bool, str]:
        with self.lock:
            task = self.tasks.get(task_id)
            if task is None or task.key != key:
                return False, "ERROR_WRONG_CAPTCHA_ID"
            if bad:
                task.reported_bad = True
            else:
                task.reported_good = True
            return True, "OK_REPORT_RECORDED"

    # ── portal ───────────────────────────────────────────────────────────────
    def session(self, cookie: str | None) -> tuple[str, Session]:
        """The session of this cookie, or a new one (with its new cookie)."""
        with self.lock:
            if cookie not in self._sessions:
                cookie = secrets.token_urlsafe(18)
                self._sessions[cookie] = Session()
            return cookie, self._sessions[cookie]

    def open_page(self, cookie: str | None, day: str, region: str, page_url: str, **served) -> str:
        """Remember the page served to this session; returns the (maybe new) cookie."""
        with self.lock:
            cookie, session = self.session(cookie)
            session.pages[(day, region)] = Served(page_url, **served)
            return cookie

    def login_form(self, cookie: str | None) -> tuple[str, str]:
        """(cookie, the CSRF token of the login form served to it)."""
        with self.lock:
            cookie, session = self.session(cookie)
            session.login_csrf = session.login_csrf or secrets.token_urlsafe(24)
            return cookie, session.login_csrf

    def log_in(self, cookie: str | None, csrf: str, user: str, password: str) -> str | None:
        """None when logged in, else why not ("csrf" or "credentials")."""
        with self.lock:
            session = self._sessions.get(cookie) if cookie else None
            if session is None or not session.login_csrf or csrf != session.login_csrf:
                reason = "csrf"
            elif user not in self.cfg.users or self.cfg.users[user] != password:
                reason = "credentials"
            else:
                session.logged_in, session.login_csrf, reason = True, None, None
            self.stats.logins["refused-" + reason if reason else "ok"] += 1
            return reason

    def logged_in(self, cookie: str | None) -> bool:
        with self.lock:
            session = self._sessions.get(cookie) if cookie else None
            return bool(session and session.logged_in)

    def maintenance_due(self, day: str, region: str) -> bool:
        """True for the first maintenance_pages posts of (day, region)."""
        with self.lock:
            n = self._maintenance.get((day, region), 0)
            self._maintenance[(day, region)] = n + 1
            if n < self.cfg.maintenance_pages:
                self.stats.maintenance_pages += 1
                return True
            return False

    def verify(
        self, cookie: str | None, day: str, region: str, token: str, form=None, path: str = "/export"
    ) -> str | None:
        """None if the token is accepted for this form post, else the refusal reason."""
        with self.lock:
            reason = self._check(cookie, day, region, token, form or {}, path)
            if reason:
                self.stats.tokens_refused[reason] += 1
            return reason

    def _check(self, cookie, day, region, token, form, path) -> str | None:
        now = self.now()
        session = self._sessions.get(cookie) if cookie else None
        if session is None:
            return "missing-session"
        served = session.pages.get((day, region))
        if served is None:
            return "wrong-session"  # this cookie was never served that (day, region) page
        page_url = served.page_url
        # the form's own checks come before the captcha's, as a web framework's CSRF check does
        if path != served.action:
            return "wrong-action"
        for name, value in served.expect.items():
            if form.get(name) != value:
                return f"bad-field-{name}"
        if not token:
            return "missing-input-response"
        task = self.tasks.get(self._tokens.get(token, ""))
        if task is None:
            return "unknown-token"
        if task.token_posted_t is None:
            task.token_posted_t = now
        if task.token_used:
            return "timeout-or-duplicate"
        task.token_used = True  # verified once, like siteverify, whatever the outcome
        if task.googlekey != (served.sitekey or sitekey_for(region)):
            return "wrong-sitekey"
        if task.pageurl != page_url:
            return "wrong-pageurl"
        if (task.invisible, task.enterprise) != (served.invisible, served.enterprise):
            return "wrong-widget-kind"  # a token solved for another kind of widget fails verification
        if task.data_s != served.data_s:
            return "wrong-data-s"
        if now > task.ready_t + self.scaled(self.cfg.token_validity_s):
            return "token-expired"
        task.accepted = True
        self.stats.tokens_accepted += 1
        self.stats.ready_to_post_s.append(now - task.ready_t)
        return None

    # ── read-outs ────────────────────────────────────────────────────────────
    def snapshot_stats(self) -> dict:
        with self.lock:
            holds = [(s, e) for s, e, _ in self._holds]
            return self.stats.as_dict(self.now(), self.cfg.threads, holds)

    def reset_stats(self) -> None:
        with self.lock:
            now = self.now()
            self._holds = [h for h in self._holds if h[1] > now]  # keep what is still held
            self.stats = Stats(epoch=now)

    def task_list(self) -> list[dict]:
        with self.lock:
            now = self.now()
            return [
                {
                    "id": t.id,
                    "googlekey": t.googlekey,
                    "pageurl": t.pageurl,
                    "submit_t": round(t.submit_t, 6),
                    "ready_t": round(t.ready_t, 6),
                    "solve_s": round(t.ready_t - t.submit_t, 6),
                    "status": "pending" if now < t.ready_t else ("unsolvable" if t.unsolvable else "ready"),
                    "polls": t.polls,
                    "last_poll_t": None if t.last_poll_t is None else round(t.last_poll_t, 6),
                    "token_posted_t": None if t.token_posted_t is None else round(t.token_posted_t, 6),
                    "token_accepted": t.accepted,
                    "reported_bad": t.reported_bad,
                    "reported_good": t.reported_good,
                    "invisible": t.invisible,
                    "enterprise": t.enterprise,
                    "data_s": t.data_s,
                }
                for t in self.tasks.values()
            ]
