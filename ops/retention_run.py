"""`make state`, `make prune [DRY_RUN=1]`, and every run's share of pruning: the configuration for
`portal_export.retention` (the store's state) and `ops.history` (luigid's task history)."""

import logging
import os
import time
from collections.abc import Callable
from datetime import datetime, timezone

from portal_export import breaker, retention, store_keys
from tasks import config, targets
from tasks.portal_shape import portal_login

log = logging.getLogger(__name__)
SHOWN = 5  # objects of each kind a dry run names


def keep_s() -> float:
    days = config.portal().keep_state_days
    if not days > 0:
        raise config.ConfigError(f"[portal] keep_state_days = {days}: give a positive number of days")
    return days * retention.DAY_S


def breakers_in_use() -> set[str] | None:
    """The breaker names of the key and login configured here; None when the key is not set."""
    if not (key := os.environ.get("CAPTCHAAI_API_KEY", "").strip()):
        return None
    names = {store_keys.breaker(breaker.fingerprint(key))}
    if (login := portal_login()) is not None and login.breaker is not None:
        names.add(login.breaker.key)
    return names


def policy() -> retention.Policy:
    return retention.Policy(time.time(), keep_s(), retention.live_runs(targets.store()), breakers_in_use())


def nightly() -> None:
    """A run's share after its work: a bounded batch. Never fails the run."""
    try:
        done = retention.prune_some(targets.store(), policy())
    except Exception as err:  # a store that is down now: the next run prunes
        log.warning("state: nothing pruned this run: %s", err)
        return
    if done:
        log.info("state: pruned %s", ", ".join(f"{n} {name}" for name, n in sorted(done.items())))


def _when(t: float | None) -> str:
    return "-" if t is None else datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def cmd_state(say: Callable[[str], None]) -> int:
    from . import history  # SQLAlchemy: only make state and make prune read luigid's history

    targets.check_store()
    say(f"state of {targets.where()} (keep_state_days {keep_s() / retention.DAY_S:g}):")
    for name, tally in retention.survey(targets.store()).items():
        say(f"  {name:<16} {tally.count:>7} objects  oldest {_when(tally.oldest):<20}  {tally.size:>10} bytes")
    found = history.survey(history.DB)
    note = f"{history.DB}: none" if found is None else f"{found.events} events, local time"
    found = found or history.History(0, 0, None, 0)
    oldest = "-" if found.oldest is None else found.oldest.strftime("%Y-%m-%dT%H:%M:%S")
    say(f"  {'luigid-history':<16} {found.rows:>7} rows     oldest {oldest:<20}  {found.size:>10} bytes ({note})")
    return 0


def cmd_prune(say: Callable[[str], None], dry_run: bool) -> int:
    """Remove now what keep_state_days lets go, in batches; `dry_run`: only say what would go."""
    from . import history

    targets.check_store()
    store = targets.store()
    rules = policy()
    shown: dict[str, int] = {}

    def said(kind: retention.Kind, gone: list[str]) -> None:
        """DRY_RUN: the first SHOWN of each kind by name (a year of state is thousands)."""
        for key in gone[: max(0, SHOWN - shown.get(kind.name, 0))] if dry_run else ():
            say(f"  would remove {store.location(key)}")
        shown[kind.name] = shown.get(kind.name, 0) + len(gone)

    done = retention.prune_all(store, rules, delete=not dry_run, say=said)
    events, tasks = history.prune(history.DB, history.cutoff_of(rules.keep_s, rules.now), delete=not dry_run)
    parts = [f"{n} {name}" for name, n in done.items() if n]
    parts += [f"{tasks} luigid-history task runs ({events} events)"] if events or tasks else []
    say(
        f"prune: {'would remove' if dry_run else 'removed'} {', '.join(parts) if parts else 'nothing'}"
        f" (older than {_when(rules.cutoff)}, keep_state_days {rules.keep_s / retention.DAY_S:g})"
        + ("; DRY_RUN: nothing removed" if dry_run else "")
    )
    if rules.breakers_in_use is None:
        say("prune: CAPTCHAAI_API_KEY is not set: every breaker kept (the one of the key in use is not known)")
    return 0
