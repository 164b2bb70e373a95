"""`make state`, `make prune [DRY_RUN=1]`, and every run's share of pruning: the configuration for
`portal_export.retention` (the store's state) and `ops.history` (luigid's task history).
"""

import datetime
import logging
import os
import time
from collections.abc import Callable

from portal_export import breaker, retention, store_keys
from portal_export.retention import Kind, Policy
from tasks import config, targets
from tasks.region import portal_login

log = logging.getLogger(__name__)
SHOWN = 5  # objects of each kind a dry run names


def keep_s() -> float:
    days = config.portal().keep_state_days
    if not days > 0:
        raise config.ConfigError(f"[portal] keep_state_days = {days}: give a positive number of days")
    return retention.keep_seconds(days)


def breakers_in_use() -> set[str] | None:
    """The breaker names of the key and login configured here; None when the key is not set."""
    key = os.environ.get("CAPTCHAAI_API_KEY", "").strip()
    if not key:
        return None
    names = {store_keys.breaker(breaker.fingerprint(key))}
    login = portal_login()
    if login is not None and login.breaker is not None:
        names.add(login.breaker.key)
    return names


def policy() -> Policy:
    return Policy(time.time(), keep_s(), retention.live_runs(targets.store()), breakers_in_use())


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
    if t is None:
        return "-"
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def cmd_state(say: Callable[[str], None]) -> int:
    from . import history  # SQLAlchemy: only make state and make prune read luigid's history

    targets.check_store()
    keep = keep_s()
    say(f"state of {targets.where()} (keep_state_days {keep / retention.DAY_S:g}):")
    for name, tally in retention.survey(targets.store()).items():
        say(f"  {name:<16} {tally.count:>7} objects  oldest {_when(tally.oldest):<20}  {tally.size:>10} bytes")
    found = history.survey(history.db_path())
    if found is None:
        say(f"  {'luigid-history':<16} {0:>7} rows     oldest {'-':<20}  {0:>10} bytes ({history.db_path()}: none)")
    else:
        oldest = "-" if found.oldest is None else found.oldest.strftime("%Y-%m-%dT%H:%M:%S")
        say(
            f"  {'luigid-history':<16} {found.rows:>7} rows     oldest {oldest:<20}  {found.size:>10} bytes"
            f" ({found.events} events, local time)"
        )
    return 0


def cmd_prune(say: Callable[[str], None], dry_run: bool) -> int:
    """Remove now what keep_state_days lets go, in batches; `dry_run`: only say what would go."""
    from . import history

    targets.check_store()
    store = targets.store()
    rules = policy()
    verb = "would remove" if dry_run else "removed"
    shown: dict[str, int] = {}

    def said(kind: Kind, gone: list[str]) -> None:
        """DRY_RUN: the first SHOWN of each kind by name (a year of state is thousands)."""
        for key in gone[: max(0, SHOWN - shown.get(kind.name, 0))] if dry_run else ():
            say(f"  would remove {store.location(key)}")
        shown[kind.name] = shown.get(kind.name, 0) + len(gone)

    done = retention.prune_all(store, rules, delete=not dry_run, say=said)
    cutoff = history.cutoff_of(rules.keep_s, rules.now)
    events, tasks = history.prune(history.db_path(), cutoff, delete=not dry_run)
    parts = [f"{n} {name}" for name, n in done.items() if n]
    parts += [f"{tasks} luigid-history task runs ({events} events)"] if events or tasks else []
    say(
        f"prune: {verb} {', '.join(parts) if parts else 'nothing'}"
        f" (older than {_when(rules.cutoff)}, keep_state_days {rules.keep_s / retention.DAY_S:g})"
        + ("; DRY_RUN: nothing removed" if dry_run else "")
    )
    if rules.breakers_in_use is None:
        say("prune: CAPTCHAAI_API_KEY is not set: every breaker kept (the one of the key in use is not known)")
    return 0
