"""Counters the tests and benchmarks read back; all JSON-serializable, keys masked."""

from __future__ import annotations

from collections import Counter, defaultdict


def mask(key) -> str:
    """Only a prefix: the stats may be printed or saved, the key must never be."""
    return f"{(key or '')[:4]}…"


def thread_timeline(intervals, epoch: float, now: float):
    """(timeline [[t, in_use], ...], peak, in_use_now) from [start, end) thread holds.

    Computed from the holds rather than sampled, so a thread freed by the clock
    (nobody polled) shows up at the exact time it was freed.
    """
    level = sum(1 for s, e in intervals if s <= epoch < e)
    deltas = Counter()
    for s, e in intervals:
        if epoch < s <= now:
            deltas[s] += 1
        if epoch < e <= now:
            deltas[e] -= 1
    timeline, peak = [[round(epoch, 6), level]], level
    for t in sorted(deltas):
        if deltas[t]:  # a hold ending as another starts at the same instant is no change
            level += deltas[t]
            timeline.append([round(t, 6), level])
            peak = max(peak, level)
    return timeline, peak, level


class Stats:
    def __init__(self, epoch: float):
        self.epoch = epoch
        self.requests = Counter()  # endpoint -> requests (faulted ones included)
        self.actions = Counter()  # res.php action -> requests
        self.codes = defaultdict(Counter)  # endpoint -> status-0 code answered -> n
        self.faults = defaultdict(Counter)  # endpoint -> fault kind -> n
        self.submits = Counter()  # masked key -> tasks created
        self.polls = Counter()  # task id -> action=get requests
        self.key_in_query = 0  # requests carrying key= in the URL query string
        self.bad_key_requests = 0
        self.ip_bans = 0
        self.tokens_issued = 0
        self.tokens_accepted = 0
        self.tokens_refused = Counter()  # reason -> n
        self.ready_to_post_s = []  # per accepted token: ready_t -> posted to the portal
        self.logins = Counter()  # "ok", "refused-credentials", "refused-csrf" -> n
        self.maintenance_pages = 0  # 200 HTML maintenance pages answered to form posts
        self.rate_limited = Counter()  # endpoint -> 429 / 503-with-Retry-After answers
        self.early = Counter()  # endpoint -> the same request again before its Retry-After allowed

    def as_dict(self, now: float, threads_limit: int, intervals) -> dict:
        timeline, peak, in_use = thread_timeline(intervals, self.epoch, now)
        return {
            "t": round(now, 6),
            "since": round(self.epoch, 6),
            "requests": dict(self.requests),
            "actions": dict(self.actions),
            "codes": {e: dict(c) for e, c in self.codes.items()},
            "faults": {e: dict(c) for e, c in self.faults.items()},
            "submits": dict(self.submits),
            "polls": dict(self.polls),
            "key_in_query": self.key_in_query,
            "bad_key_requests": self.bad_key_requests,
            "ip_bans": self.ip_bans,
            "threads": {"limit": threads_limit, "in_use": in_use, "peak": peak, "timeline": timeline},
            "logins": dict(self.logins),
            "maintenance_pages": self.maintenance_pages,
            "rate_limited": dict(self.rate_limited),
            "early": dict(self.early),
            "tokens": {
                "issued": self.tokens_issued,
                "accepted": self.tokens_accepted,
                "refused": dict(self.tokens_refused),
                "ready_to_post_s": [round(x, 6) for x in self.ready_to_post_s],
            },
        }
