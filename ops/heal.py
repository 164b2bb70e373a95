"""Days that heal: at a run's start, its days that failed validation at least `[portal]
heal_after_hours` ago have their unsolvable regions set aside (`portal_export.redo`) to be solved again.
Here rather than in `complete()`, so completeness stays "the output exists", as every host and luigid
agree; a region another host set aside already is not set aside twice.
"""

import datetime
from collections.abc import Callable, Sequence

from portal_export import redo
from tasks import config, targets

HOUR_S = 3600.0


def after_s() -> float:
    """`[portal] heal_after_hours` in seconds; ConfigError for one that cannot work."""
    hours = config.portal().heal_after_hours
    if not hours >= 0:  # negative, or nan
        raise config.ConfigError(f"[portal] heal_after_hours = {hours}: give 0 or more hours")
    return hours * HOUR_S


def heal(days: Sequence[datetime.date], say: Callable[[str], None]) -> float | None:
    """Set aside the unsolvable regions of `days` due to heal; when the newest of them was written, or None."""
    wait, store = after_s(), targets.store()
    missing = sorted(set(days) - set(targets.complete_days(list(days))))
    newest = None
    for day in missing:
        done = redo.set_aside(store, day, config.regions(), older_than_s=wait)
        if done.regions:
            say(f"heal: {day} failed validation; solving {', '.join(done.regions)} again")
            newest = max(newest or 0.0, done.finished_at or 0.0)
    return newest
