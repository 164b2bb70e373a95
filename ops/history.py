"""luigid's task history of `make scheduler` (var/luigid/history.db), kept `keep_state_days`: events
(`ts` in local time, as Luigi writes them) older than the cutoff go, then the task runs left with none,
with their parameters, in batches of short transactions, so luigid waits one at most."""

import contextlib
import datetime
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy
from luigi.db_task_history import TaskEvent, TaskParameter, TaskRecord
from sqlalchemy import exists, func, select

from .luigid import VAR

BATCH = 1000
DB = VAR / "luigid" / "history.db"


@contextlib.contextmanager
def _events(path: Path) -> Iterator[sqlalchemy.engine.Engine | None]:
    """The existing history's engine; None when it has no events table."""
    engine = sqlalchemy.create_engine(f"sqlite:///{path}", connect_args={"timeout": 30})
    try:
        yield engine if TaskEvent.__tablename__ in sqlalchemy.inspect(engine).get_table_names() else None
    finally:
        engine.dispose()


def cutoff_of(keep_s: float, now: float) -> datetime.datetime:
    """The cutoff as Luigi stamps its events: naive local time."""
    return datetime.datetime.fromtimestamp(now - keep_s)


@dataclass
class History:
    rows: int  # task runs
    events: int
    oldest: datetime.datetime | None
    size: int


def survey(path: Path) -> History | None:
    """What the history holds; None when there is none (luigid never ran with it here)."""
    if not path.exists():
        return None
    rows, events, oldest = 0, 0, None
    with _events(path) as engine:
        if engine is not None:
            with engine.connect() as conn:
                rows = conn.execute(select(func.count()).select_from(TaskRecord.__table__)).scalar()
                events, oldest = conn.execute(select(func.count(), func.min(TaskEvent.ts))).one()
    if isinstance(oldest, str):  # SQLite hands back the text when the column's type is not declared alike
        oldest = datetime.datetime.fromisoformat(oldest)
    return History(int(rows or 0), int(events or 0), oldest, path.stat().st_size)


def prune(path: Path, cutoff: datetime.datetime, delete: bool = True, batch: int = BATCH) -> tuple[int, int]:
    """(events, task runs) older than `cutoff` removed, or with `delete=False` counted only."""
    if not path.exists():
        return 0, 0
    with _events(path) as engine:
        if engine is None:
            return 0, 0
        if delete:
            return _delete(engine, cutoff, batch)
        with engine.connect() as conn:
            events = conn.execute(select(func.count()).where(TaskEvent.ts < cutoff)).scalar()
            # a task run goes once its newest event is older than the cutoff
            newest = select(TaskEvent.task_id).group_by(TaskEvent.task_id).having(func.max(TaskEvent.ts) < cutoff)
            tasks = conn.execute(select(func.count()).select_from(newest.subquery())).scalar()
    return int(events or 0), int(tasks or 0)


def _delete(engine: sqlalchemy.engine.Engine, cutoff: datetime.datetime, batch: int) -> tuple[int, int]:
    events = tasks = 0
    old = select(TaskEvent.id).where(TaskEvent.ts < cutoff).limit(batch).scalar_subquery()
    while True:
        with engine.begin() as conn:
            n = conn.execute(sqlalchemy.delete(TaskEvent).where(TaskEvent.id.in_(old))).rowcount
        events += n
        if n < batch:
            break
    orphans = select(TaskRecord.id).where(~exists().where(TaskEvent.task_id == TaskRecord.id)).limit(batch)
    while True:
        with engine.begin() as conn:
            ids = [row[0] for row in conn.execute(orphans)]
            if ids:
                conn.execute(sqlalchemy.delete(TaskParameter).where(TaskParameter.task_id.in_(ids)))
                conn.execute(sqlalchemy.delete(TaskRecord).where(TaskRecord.id.in_(ids)))
        tasks += len(ids)
        if len(ids) < batch:
            break
    return events, tasks
