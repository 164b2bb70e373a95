"""One Luigi run through `luigi.build(..., detailed_summary=True)`, its status mapped onto `[retcode]`
as `luigi.retcodes.run_with_retcodes` does for the `luigi` command (which takes no
`worker_scheduler_factory`, the hook the cap needs). The run keeps Luigi's same-command lock."""

import logging
from collections.abc import Callable, Collection, Sequence
from typing import Any

import luigi
import luigi.execution_summary
import luigi.interface
import luigi.retcodes
import luigi.rpc
import luigi.scheduler
import luigi.worker

from tasks.process import helpers_die_with_worker

from . import stopping

log = logging.getLogger(__name__)
Status = luigi.execution_summary.LuigiStatusCode


class Worker(luigi.worker.Worker):
    """Luigi's worker, whose way out ends its task processes before it joins its keep-alive thread:
    that waits for a ping in flight (up to stopping.PING_TIMEOUT_S from a slow or frozen luigid),
    while the tasks would go on polling their solves. (`_running_tasks` is the 3.8.1 internal its
    own `__exit__` reads; it ends them again, which a task process that is ending ignores.)"""

    def __exit__(self, *exc: Any) -> Any:
        for task in self._running_tasks.values():
            if task.is_alive():
                task.terminate()
        return super().__exit__(*exc)  # type: ignore[no-untyped-call]


class WorkerSchedulerFactory:
    """Luigi's own factory, plus hooks: `on_local(scheduler)` gets the local scheduler (the cap is set on
    it), `on_worker(worker, processes)` the worker (its process count follows the slots); `settings`
    are this worker's `[worker]` settings (no arguments of `build`)."""

    def __init__(
        self,
        on_local: Callable[[luigi.scheduler.Scheduler], None] | None = None,
        on_worker: Callable[[luigi.worker.Worker, int], None] | None = None,
        **settings: object,
    ) -> None:
        self.on_local = on_local
        self.on_worker = on_worker
        self.settings = settings
        # the ids of the workers it made ("Worker(salt=..., host=..., pid=...)"): this run's among a
        # task's workers on luigid, where hostname and pid alone may be another host's too
        self.own_workers: set[str] = set()

    def create_local_scheduler(self) -> luigi.scheduler.Scheduler:
        # the arguments of Luigi's own factory (luigi.interface)
        scheduler = luigi.scheduler.Scheduler(prune_on_get_work=True, record_task_history=False)
        if self.on_local is not None:
            self.on_local(scheduler)
        return scheduler

    def create_remote_scheduler(self, url: str) -> luigi.rpc.RemoteScheduler:
        return stopping.RemoteScheduler(url)  # Luigi's, whose retries end when the run is told to stop

    def create_worker(self, scheduler: Any, worker_processes: int, assistant: bool = False) -> luigi.worker.Worker:
        with helpers_die_with_worker():  # its completion cache's server, when it has one
            worker = Worker(  # type: ignore[no-untyped-call]
                scheduler=scheduler, worker_processes=worker_processes, assistant=assistant, **self.settings
            )
        self.own_workers.add(str(worker._id))
        if self.on_worker is not None:
            self.on_worker(worker, int(worker_processes))
        return worker


def status_code(status: Status, codes: luigi.retcodes.retcode) -> int:
    """The [retcode] of a run's status: the largest of the codes its kinds of trouble have, as
    `luigi --retcode-*` chooses (a run with failed tasks and a scheduling error exits with the
    larger of the two)."""
    kinds: dict[str, tuple[int, ...]] = {
        "SUCCESS": (),
        "SUCCESS_WITH_RETRY": (),
        "FAILED": (codes.task_failed,),
        "FAILED_AND_SCHEDULING_FAILED": (codes.task_failed, codes.scheduling_error),
        "SCHEDULING_FAILED": (codes.scheduling_error,),
        "NOT_RUN": (codes.not_run,),
        "MISSING_EXT": (codes.missing_data,),
    }
    if status.name in kinds:
        return max(kinds[status.name], default=0)
    # A status a later Luigi adds: its smiley says whether the run succeeded.
    smiley: str = status.value[0]
    return 0 if smiley == ":)" else int(codes.task_failed)


def exit_code(status: Status, roots_complete: bool, codes: luigi.retcodes.retcode) -> int:
    """The run's [retcode]: its status's, or `not_run` when nothing went wrong yet the asked-for
    tasks are not complete (the worker ended while others held them, say)."""
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
    """Run `tasks` (the local scheduler when `scheduler_url` is None); the [retcode] of the run.
    `lock=False` for a second run in the same process, which holds Luigi's same-command lock already."""
    codes = luigi.retcodes.retcode()
    where: dict[str, Any] = {"scheduler_url": scheduler_url} if scheduler_url else {"local_scheduler": True}
    if workers:
        where["workers"] = workers
    try:
        result = luigi.build(
            list(tasks),
            worker_scheduler_factory=factory,
            detailed_summary=True,
            no_lock=not lock,
            lock_pid_dir=lock_dir,
            **where,
        )
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
    """Hand back to luigid the tasks this process's workers were running when the run was told
    to stop, each pending again: the next run (or another host's) runs them at once, rather than
    after luigid takes the worker for dead ([scheduler] worker_disconnect_delay) and retry_delay
    more. Luigi lets only the worker running a task end it (as failed); with retry_count = 1 that
    disables it, so it is re-enabled and its failure forgiven. luigid gone or silent: nothing to
    tell (each RPC now makes one short attempt)."""
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
