"""The end-of-run summary the terminal, the cron log and the alert all say, from plain facts the Luigi
layer collects. It names codes, days and commands only: never a response body, a URL or a key."""

from __future__ import annotations

import datetime
import textwrap
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

DAYS_PER_LINE_WIDTH = 66  # wrapped day lists stay readable on a phone
SHAPE_CODES = frozenset({"PORTAL_FIELD_VALUE", "PORTAL_RECORDS_MISMATCH"})  # a rerun alone cannot help


@dataclass(frozen=True)
class MissingDay:
    """A day asked for whose output does not exist at the end of the run."""

    day: datetime.date
    failed_regions: Mapping[str, str] = field(default_factory=dict)  # region -> error code
    day_code: str | None = None  # the day's own failure, other than validation
    unsolvable_ratio: float | None = None  # set when the day failed validation
    unsolvable_regions: Sequence[str] = ()


@dataclass(frozen=True)
class RunFacts:
    command: str  # export, backfill or retry-unsolvable
    days: Sequence[datetime.date]  # asked for, in order
    missing: Sequence[MissingDay]
    regions: Sequence[str]  # configured regions
    rerun: str  # the exact command that asks for the same work again
    exit_code: int
    max_unsolvable_ratio: float = 0.25
    breaker_codes: Sequence[str] = ()  # every open breaker
    busy_plan: tuple[int, int] | None = None  # (threads, working) when all were busy at the start
    slow_days: Mapping[datetime.date, float] = field(default_factory=dict)  # completed days, p95 above the line
    p95_warn_s: float = 60.0
    stopped: str | None = None  # why the run ended before Luigi finished, if it did
    where: str = ""  # host and data dir, for the footer
    seen_by: Mapping[str, Mapping[str, int]] = field(default_factory=dict)  # host -> failure code -> tasks


@dataclass(frozen=True)
class Summary:
    subject: str
    body: str
    kind: str  # "failure", "warning" or "ok": only the first two are sent

    @property
    def text(self) -> str:
        return f"{self.subject}\n\n{self.body}" if self.body else self.subject

    @property
    def to_send(self) -> bool:
        return self.kind != "ok"


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def days_label(days: Sequence[datetime.date]) -> str:
    if not days:
        return "no day"
    return str(days[0]) if len(days) == 1 else f"{days[0]}..{days[-1]}"


def day_list(days: Sequence[datetime.date]) -> str:
    """Every day named (so each can be searched for), wrapped."""
    text = ", ".join(str(d) for d in days)
    return textwrap.fill(text, DAYS_PER_LINE_WIDTH, initial_indent="  ", subsequent_indent="  ", break_on_hyphens=False)


def cause(missing: MissingDay, regions: Sequence[str]) -> str:
    """One line for why a day is missing: regions grouped by their code."""
    by_code: dict[str, list[str]] = defaultdict(list)
    for region in regions:
        if region in missing.failed_regions:
            by_code[missing.failed_regions[region]].append(region)
    if len(by_code) == 1 and len(next(iter(by_code.values()))) == len(regions) > 1:
        parts = [f"every region {next(iter(by_code))}"]
    else:
        parts = [f"{', '.join(names)} {code}" for code, names in sorted(by_code.items())]
    if missing.day_code:
        parts.append(f"day {missing.day_code}")
    return "; ".join(parts) or "not run (no region failed; the run ended before the day)"


def summarize(facts: RunFacts) -> Summary:
    """The one text of a run: subject line, then what is missing, warnings and what to do next."""
    total = len(facts.days)
    missing = sorted(facts.missing, key=lambda m: m.day)
    warnings = warning_lines(facts)
    head = f"{facts.command} {days_label(facts.days)}"
    if missing:
        outcome = "missing" if total == 1 else f"{len(missing)} of {total} days missing"
        kind = "failure"
    else:
        outcome = "complete" if total == 1 else f"all {total} days complete"
        if warnings:
            outcome += f", {plural(len(warnings), 'warning')}"
        kind = "warning" if warnings else "ok"

    sections: list[str] = []
    if facts.stopped:
        sections.append(f"The run stopped: {facts.stopped}")
    invalid = [m for m in missing if m.unsolvable_ratio is not None]
    failed = [m for m in missing if m.unsolvable_ratio is None]
    if failed:
        groups: dict[str, list[datetime.date]] = defaultdict(list)
        for m in failed:
            groups[cause(m, facts.regions)].append(m.day)
        lines = ["Missing days, by cause:"]
        for why, days in sorted(groups.items(), key=lambda g: (-len(g[1]), g[0])):
            lines += [f"- {why} ({plural(len(days), 'day')}):", day_list(days)]
        sections.append("\n".join(lines))
    if facts.seen_by:
        lines = ["Where they failed:"]
        for host, by_code in sorted(facts.seen_by.items()):
            lines.append(f"- {host}: " + ", ".join(f"{n} × {code}" for code, n in sorted(by_code.items())))
        sections.append("\n".join(lines))
    if invalid:
        lines = [f"Failed validation (unsolvable ratio above {facts.max_unsolvable_ratio:g}):"]
        for m in invalid:
            regions = f" ({', '.join(m.unsolvable_regions)})" if m.unsolvable_regions else ""
            lines.append(f"- {m.day}: unsolvable ratio {m.unsolvable_ratio:.2f}{regions}")
        sections.append("\n".join(lines))
    if warnings:
        sections.append("Warnings:\n" + "\n".join(f"- {w}" for w in warnings))
    if missing:
        sections.append("What to do next:\n" + "\n".join(f"- {step}" for step in next_steps(facts, failed, invalid)))
    footer = f"exit code {facts.exit_code}" + (f"; {facts.where}" if facts.where else "")
    body = "\n\n".join([*sections, footer]) if sections else ""
    return Summary(f"{head}: {outcome}", body, kind)


def warning_lines(facts: RunFacts) -> list[str]:
    lines = []
    if facts.slow_days:
        slow = ", ".join(f"{d} {s:.1f} s" for d, s in sorted(facts.slow_days.items()))
        lines.append(
            f"p95 solve time above {facts.p95_warn_s:g} s on {plural(len(facts.slow_days), 'day')}: {slow}. "
            "A saturated plan shows here before a day fails: see `make plan` and `make report`."
        )
    if facts.busy_plan:
        threads, working = facts.busy_plan
        lines.append(
            f"all {threads} plan threads were busy with other consumers of the key when the run started "
            f"({working} working): solves waited for threads. See `make plan`."
        )
    return lines


def next_steps(facts: RunFacts, failed: Sequence[MissingDay], invalid: Sequence[MissingDay]) -> list[str]:
    steps = []
    if facts.breaker_codes:
        codes = ", ".join(sorted(set(facts.breaker_codes)))
        steps.append(
            f"A breaker is open ({codes}): every run with this key or login fails at once, sending nothing. "
            "Fix the key, the plan or the portal login, then run: make clear-breaker"
        )
    if facts.busy_plan and failed:
        steps.append("The plan was busy with other consumers: free threads or raise the plan before the rerun.")
    if shape := sorted({code for m in failed for code in m.failed_regions.values()} & SHAPE_CODES):
        steps.append(
            f"The portal's form or answer does not fit [portal] ({', '.join(shape)}): fix export_fields, "
            "region_values or record_checks as the message says (`make probe` shows the form)"
        )
    if failed:
        steps.append(f"{'Then rerun' if steps else 'Rerun'}: {facts.rerun}")
    for m in invalid:
        steps.append(
            f"The unsolvable regions of {m.day} are solved again by the first run [portal] heal_after_hours "
            f"after the failure; to re-attempt them now: make retry-unsolvable DAY={m.day}"
        )
    return steps


def progress_line(day: datetime.date, done: int, total: int, elapsed_s: float) -> str:
    """`day 2026-06-03 done: 12 of 92, about 31 min left`, from the pace of the run so far."""
    line = f"day {day} done: {done} of {total}"
    if done >= total or done <= 0:
        return line
    remaining = elapsed_s / done * (total - done)
    if remaining < 90:
        return f"{line}, about {max(1, round(remaining))} s left"
    minutes = round(remaining / 60)
    if minutes < 120:
        return f"{line}, about {minutes} min left"
    return f"{line}, about {minutes // 60} h {minutes % 60:02d} min left"
