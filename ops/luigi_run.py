"""One `luigi.build(..., detailed_summary=True)`, its status mapped onto `[retcode]` as
`luigi.retcodes.run_with_retcodes` does (which takes no `worker_scheduler_factory`, the cap's hook)."""

import logging
import multiprocessing
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any

import luigi
import luigi.retcodes
import luigi.rpc
import luigi.scheduler
import luigi.worker

from tasks.base import helpers_die_with_worker

from . import stopping

log = logging.getLogger(__name__)


class Worker(luigi.worker.Worker):
    """Luigi's worker, whose way out ends its task processes first, within `stopping.TASKS_END_WITHIN_S` in all: its
    keep-alive thread's ping in flight (a slow or frozen luigid) would let them poll on, and one still unwinding as the
    worker exits dies with it (tasks/base.py), its in-flight mark left. Not through `TaskProcess.terminate`: with
    psutil it waits for each process in turn, for as long as it takes, and one stuck in its unwinding (deaf to a
    second stop) would hold the run for ever. (`_running_tasks`: 3.8.1's, read by `__exit__`.)"""

    def __exit__(self, *exc: Any) -> Any:
        running = [task for task in self._running_tasks.values() if task.is_alive()]
        for task in running:
            multiprocessing.Process.terminate(task)
        deadline = time.monotonic() + stopping.TASKS_END_WITHIN_S
        for task in running:
            task.join(max(0.0, deadline - time.monotonic()))
            if task.is_alive():  # its marks are its run's to prune (ops/steward.py)
                log.warning(
                    "task process %s (%s) did not end within %.0f s of the stop: killed",
                    task.pid,
                    task.task,
                    stopping.TASKS_END_WITHIN_S,
                )
                task.kill()
                task.join()
        return super().__exit__(*exc)  # type: ignore[no-untyped-call]


class WorkerSchedulerFactory:
    """Luigi's own factory, with hooks for the local scheduler and the worker, and `[worker]` settings."""

    def __init__(
        self,
        on_local: Callable[[luigi.scheduler.Scheduler], None] = lambda scheduler: None,
        on_worker: Callable[[luigi.worker.Worker, int], None] = lambda worker, processes: None,
        **settings: object,
    ) -> None:
        self.on_local, self.on_worker, self.settings = on_local, on_worker, settings
        self.own_workers: set[str] = set()  # the ids of the workers it made: with their salt, never another host's

    def create_local_scheduler(self) -> luigi.scheduler.Scheduler:
        scheduler = luigi.scheduler.Scheduler(prune_on_get_work=True, record_task_history=False)
        self.on_local(scheduler)
        return scheduler

    def create_remote_scheduler(self, url: str) -> luigi.rpc.RemoteScheduler:
        return stopping.RemoteScheduler(url)

    def create_worker(self, scheduler: Any, worker_processes: int, assistant: bool = False) -> luigi.worker.Worker:
        with helpers_die_with_worker():  # its completion cache's server, when it has one
            worker = Worker(  # type: ignore[no-untyped-call]
                scheduler=scheduler, worker_processes=worker_processes, assistant=assistant, **self.settings
            )
        self.own_workers.add(str(worker._id))
        self.on_worker(worker, int(worker_processes))
        return worker


def status_code(status: luigi.LuigiStatusCode, codes: luigi.retcodes.retcode) -> int:
    """The [retcode] of a run's status: the largest of its kinds of trouble's, as `luigi` chooses; for a
    status a later Luigi adds, its smiley says whether the run succeeded."""
    kinds = {
        "FAILED": codes.task_failed,
        "FAILED_AND_SCHEDULING_FAILED": max(codes.task_failed, codes.scheduling_error),
        "SCHEDULING_FAILED": codes.scheduling_error,
        "NOT_RUN": codes.not_run,
        "MISSING_EXT": codes.missing_data,
    }
    return int(kinds.get(status.name, 0 if str(status.value[0]) == ":)" else codes.task_failed))


def exit_code(status: luigi.LuigiStatusCode, roots_complete: bool, codes: luigi.retcodes.retcode) -> int:
    """The status's [retcode], or `not_run` when nothing went wrong yet the tasks are not complete."""
    code = status_code(status, codes)
    return codes.not_run if code == 0 and not roots_complete else code


def run(
    tasks: Sequence[luigi.Task],
    factory: WorkerSchedulerFactory,
    *,
    lock_dir: str,
    scheduler_url: str | None,
    workers: int | None = None,
    lock: bool = True,
) -> int:
    """Run `tasks`; its [retcode]. `lock=False`: a second run, in a process that holds Luigi's lock."""
    codes = luigi.retcodes.retcode()
    options: dict[str, Any] = {"scheduler_url": scheduler_url} if scheduler_url else {"local_scheduler": True}
    options.update(worker_scheduler_factory=factory, detailed_summary=True, no_lock=not lock, lock_pid_dir=lock_dir)
    if workers:
        options["workers"] = workers
    try:
        result = luigi.build(list(tasks), **options)
        roots_complete = all(task.complete() for task in tasks)
    except luigi.interface.PidLockAlreadyTakenExit:
        return int(codes.already_running)
    except KeyboardInterrupt:
        if scheduler_url and stopping.requested():
            let_go(scheduler_url, factory.own_workers)
        raise
    except Exception:
        log.exception("Luigi stopped with an unexpected error")
        return int(codes.unhandled_exception)
    return exit_code(result.status, roots_complete, codes)


def let_go(url: str, own_workers: Collection[str]) -> None:
    """Hand this process's running tasks back to luigid as the run stops, so the next run needn't wait for
    luigid to take the worker for dead: failed (only their worker may), re-enabled and forgiven."""
    sched: Any = stopping.RemoteScheduler(url)
    try:
        for task_id, task in sched.task_list("RUNNING", "").items():
            if task.get("worker_running") in own_workers:
                sched.add_task(task_id=task_id, status="FAILED", worker=task["worker_running"], expl="run stopped")
                sched.re_enable_task(task_id)
                sched.forgive_failures(task_id)
    except luigi.rpc.RPCError as err:
        log.warning(
            "luigid did not answer (%s): it lists this run's tasks as running until it takes the worker for dead",
            err.sub_exception or err,
        )
