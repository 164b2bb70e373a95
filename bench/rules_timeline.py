"""The recorded nights (bench/timeline.json, `make bench-timeline`) as a `promtool test rules` file.

Each step of the recording (a night, a runbook action) becomes the values of every portal_export_*
series from the time it ended until the next one, scraped every SCRAPE_S through both endpoints
(the metrics server and luigid), the nightly run at local 03:00 of the host's time zone (one test
group per zone in TZS) and the operator's actions the hours after it that the recording says. The
metrics server is down for an hour after night DOWN_NIGHT (luigid still serves).

What must fire, and when, comes from what each step was, not from the metrics: a failed night or a
refused key leaves a failed day, a night that did not run or failed leaves its day missing until the
step that completes it, a refused key opens the breaker until the key is rotated, a lowered limit
leaves the newest day over it until retry-unsolvable sets the day aside. Each alert must be firing
by the time its promise (FIRES_WITHIN) says, and not fire at any other time.
"""

from __future__ import annotations

import bisect
import collections
import datetime

from portal_export.metrics import midnight_utc

from . import config

SCRAPE_S = 300  # also the evaluation interval: of the runs of a few nights, and the exporter down
FULL_SCRAPE_S = 900  # of the whole recording (a third of the evaluations)
TZS = {"UTC-8": -8, "UTC": 0, "UTC+9": 9}
JOBS = {"portal-export": "metrics:9464", "luigid": "scheduler:8082"}
NIGHT_LOCAL_H = 3
DOWN_NIGHT, DOWN_AT_H, DOWN_S = 55, 9, 3600  # the metrics server down at local 12:00 for an hour
RETRY_GOING_S = 1800  # how long a retry-unsolvable keeps its day aside: its solves, retried past their deadline
DAY = 86400
NO_SUCCESS_S = 26 * 3600
# what docs/monitoring.md promises: after its condition begins, each alert fires within this
FIRES_WITHIN = {
    "PortalExportNoSuccess": 3600,
    "PortalExportDaysMissing": 6 * 3600,
    "PortalExportDaysFailed": 600,
    "PortalExportBreakerOpen": 60,
    "PortalExportUnsolvableRatioHigh": 0,
    "PortalExportExporterDown": 300,  # at 5 min scrapes: within 10 min of going down just after one
}
COMPLETES = {"night", "killed night", "retry-unsolvable", "rotated key", "backfill"}


def night_at(n, tz):
    """Night n (day FIRST + n - 1) at local 03:00: on UTC date day + 1, seconds after midnight of FIRST."""
    return n * DAY + ((NIGHT_LOCAL_H - tz) % 24) * 3600


class Timeline:
    """The recording's steps placed in one time zone: (sim time they ended, step), oldest first."""

    def __init__(self, recording, tz, down_night=DOWN_NIGHT, scrape_s=FULL_SCRAPE_S):
        self.scrape = scrape_s
        self.first = datetime.date.fromisoformat(recording["first_day"])
        self.base = midnight_utc(self.first)
        self.nights = recording["nights"]
        self.steps = []
        for step in recording["steps"]:
            start = night_at(step["night"], tz) + step["at_h"] * 3600
            ended = start + round(step["after_s"] / config.TIME_SCALE)
            before = self.steps[-1] if self.steps else None
            if before and before["what"] == step["what"] + " (going)":
                ended = before["ended"] + RETRY_GOING_S
            self.steps.append(dict(step, start=start, ended=ended))
        self.ends = [s["ended"] for s in self.steps]
        self.started = [s["started"] for s in self.steps]
        assert self.started == sorted(self.started)
        assert self.ends == sorted(self.ends), "steps of the recording overlap on the timeline"
        self.down = None if down_night is None else night_at(down_night, tz) + DOWN_AT_H * 3600 + 1  # after a scrape
        self.end = night_at(self.nights + 1, tz)

    def sim(self, real):
        """A real time a step wrote (a file's mtime) on the timeline: within the step that wrote it."""
        i = max(0, bisect.bisect_right(self.started, real) - 1)
        return round(self.steps[i]["start"] + (real - self.started[i]) / config.TIME_SCALE)

    def at(self, t):
        """{series: value} scraped at t (None before the first step)."""
        i = bisect.bisect_right(self.ends, t) - 1
        if i < 0:
            return None
        today = str((datetime.datetime.fromtimestamp(self.base + t, datetime.timezone.utc)).date())
        values = self.steps[i]["metrics"].get(today)
        assert values is not None, f"the recording has no scrape of {self.steps[i]['what']} seen on {today}"
        out = dict(values)
        if "portal_export_last_success_timestamp_seconds" in out:
            out["portal_export_last_success_timestamp_seconds"] = self.sim(
                out["portal_export_last_success_timestamp_seconds"]
            )
        if "portal_export_last_complete_day_timestamp_seconds" in out:
            out["portal_export_last_complete_day_timestamp_seconds"] -= self.base
        return out

    def grid(self):
        """The scrapes, from promtool's time 0 (midnight UTC of the first day; no target before the first step)."""
        return range(0, self.end, self.scrape)

    # ------------------------------------------------------------------ what must fire, from the steps

    def conditions(self):
        """{alertname: [(begins, ends, labels)]}: when each alert's condition holds, by what the steps were."""
        out = {name: [] for name in FIRES_WITHIN}
        newest, done = None, []
        for s in self.steps:  # NoSuccess: between the steps that wrote the newest complete day
            if s["what"] in COMPLETES and s["exit"][-1] == 0 and (newest is None or s["day"] >= newest):
                newest = s["day"]
                done.append(s["ended"])
        for wrote, then in zip(done, [*done[1:], self.end], strict=True):
            if then - wrote > NO_SUCCESS_S:
                out["PortalExportNoSuccess"].append((wrote + NO_SUCCESS_S, then, {}))
        for n in range(1, self.nights + 1):  # DaysMissing: a day missing after the day it was yesterday
            out["PortalExportDaysMissing"] += [
                (max(a, (n + 1) * DAY), b, {}) for a, b in self.missing(n) if b > (n + 1) * DAY
            ]
        for i, s in enumerate(self.steps):
            fixed = next(
                (t["ended"] for t in self.steps[i + 1 :] if t["day"] == s["day"] and t.get("exit") == [0]), self.end
            )
            if s["what"] in ("failed night", "refused key"):
                out["PortalExportDaysFailed"].append((s["ended"], fixed, {}))
            if s["what"] == "refused key":
                rotated = next(t["ended"] for t in self.steps[i + 1 :] if t["what"] == "rotated key")
                out["PortalExportBreakerOpen"].append((s["ended"], rotated, {}))
            if s["what"] == "lowered limit":
                out["PortalExportUnsolvableRatioHigh"].append((s["ended"], self.steps[i + 1]["ended"], {}))
        down = {"job": "portal-export", "instance": JOBS["portal-export"]}
        if self.down is not None:
            out["PortalExportExporterDown"].append((self.down, self.down + DOWN_S, down))
        return {name: _merged(found) for name, found in out.items()}

    def missing(self, n):
        """When night n's day was missing, from the midnight it became yesterday (UTC)."""
        day = str(self.first + datetime.timedelta(days=n - 1))
        spans, since = [], n * DAY
        for s in self.steps:
            if s["day"] != day:
                continue
            complete = not s["what"].endswith("(going)") and s["what"] in COMPLETES and s["exit"][-1] == 0
            if complete and since is not None:
                spans.append((since, s["ended"]))
                since = None
            elif not complete and since is None:
                since = s["ended"]
        return spans + ([(since, self.end)] if since is not None else [])

    def checks(self, severity):
        """promql_expr_test entries: each alert firing by its promise, and firing at no other time."""
        tests = []
        start = -(-self.ends[0] // self.scrape) * self.scrape
        for name, spans in self.conditions().items():
            within, exempt = FIRES_WITHIN[name], []
            for begins, ends, labels in spans:
                seen = -(-begins // self.scrape) * self.scrape
                must = -(-(seen + within) // self.scrape) * self.scrape  # an evaluation
                if ends > must:
                    shown = {"alertname": name, "alertstate": "firing", **labels, "severity": severity[name]}
                    tests.append(_expr(must, f'ALERTS{{alertname="{name}",alertstate="firing"}}', [shown]))
                if ends > seen + within - self.scrape:
                    exempt.append((seen + within - self.scrape, ends + 2 * self.scrape))
            quiet_from = start
            for a, b, _ in [*_merged([(a, b, {}) for a, b in exempt]), (self.end, self.end, {})]:
                if a - self.scrape - quiet_from >= self.scrape:
                    span = a - self.scrape - quiet_from
                    expr = f'count_over_time(ALERTS{{alertname="{name}",alertstate="firing"}}[{span}s])'
                    tests.append(_expr(a - self.scrape, expr, []))
                quiet_from = max(quiet_from, b)
        return tests

    # ------------------------------------------------------------------ the series

    def series(self):
        """{series with job and instance: [value or None per scrape]}, both endpoints scraped."""
        grid = self.grid()
        out = collections.defaultdict(lambda: [None] * len(grid))
        for i, t in enumerate(grid):
            values = self.at(t)
            if values is None:
                continue
            for job, instance in JOBS.items():
                down = job == "portal-export" and self.down is not None and self.down <= t < self.down + DOWN_S
                where = f'job="{job}",instance="{instance}"'
                out[f"up{{{where}}}"][i] = 0 if down else 1
                for name, value in ({} if down or values is None else values).items():
                    key = name[:-1] + f",{where}}}" if name.endswith("}") else f"{name}{{{where}}}"
                    out[key][i] = value
        return dict(out)

    def group(self, severity):
        """One `tests:` entry of a promtool test file."""
        series = [{"series": k, "values": _compact(v)} for k, v in sorted(self.series().items())]
        return {"interval": f"{self.scrape}s", "input_series": series, "promql_expr_test": self.checks(severity)}


def _merged(spans):
    out = []
    for a, b, labels in sorted(spans, key=lambda s: s[:2]):
        if out and a <= out[-1][1] and labels == out[-1][2]:
            out[-1] = (out[-1][0], max(b, out[-1][1]), labels)
        else:
            out.append((a, b, labels))
    return out


def _expr(at, expr, samples):
    shown = [
        {"labels": "ALERTS{" + ",".join(f'{k}="{v}"' for k, v in sorted(s.items())) + "}", "value": 1} for s in samples
    ]
    return {"expr": expr, "eval_time": f"{at}s", "exp_samples": shown}


def _compact(values):
    """promtool's expanding notation: runs of one value as `v+0xN`, missing scrapes as `_xN`."""
    runs = []
    for v in values:
        if runs and runs[-1][0] == v:
            runs[-1][1] += 1
        else:
            runs.append([v, 1])
    return " ".join(
        ("_" if v is None else f"{v!r}") if n == 1 else (f"_x{n}" if v is None else f"{v!r}+0x{n - 1}") for v, n in runs
    )


def test_file(recording, rules_file, severity, tz):
    """The promtool test file of the whole recording, the host at UTC + tz hours."""
    return {
        "rule_files": [str(rules_file)],
        "evaluation_interval": f"{FULL_SCRAPE_S}s",
        "tests": [Timeline(recording, tz).group(severity)],
    }


def first_fired(recording, alert):
    """The night after which `alert` first must fire (UTC)."""
    begins = Timeline(recording, 0).conditions()[alert][0][0]
    return begins // DAY


def segment(recording, first, stop):
    """Nights first .. stop - 1 of the recording alone, as a recording of its own."""
    day = datetime.date.fromisoformat(recording["first_day"]) + datetime.timedelta(days=first - 1)
    steps = [dict(s, night=s["night"] - first + 1) for s in recording["steps"] if first <= s["night"] < stop]
    return {"first_day": str(day), "nights": stop - first, "steps": steps}


def segment_file(recording, rules_file, severity, first, stop):
    """The test file of a few nights, at UTC: the metrics server down in them if DOWN_NIGHT is."""
    down = DOWN_NIGHT - first + 1 if first <= DOWN_NIGHT < stop else None
    part = segment(recording, first, stop)
    return {
        "rule_files": [str(rules_file)],
        "evaluation_interval": f"{SCRAPE_S}s",
        "tests": [Timeline(part, 0, down, SCRAPE_S).group(severity)],
    }
