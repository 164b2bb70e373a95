"""What a task shows in the visualiser beyond Luigi's own status."""

from contextlib import contextmanager

from .secrets import scrub


@contextmanager
def failure_shown(task):
    """On failure, replace the task's last progress message with the error's code.

    Inside run(): Luigi unhooks set_status_message before it calls on_failure.
    """
    try:
        yield
    except Exception as err:
        task.set_status_message(scrub(f"failed: {getattr(err, 'code', type(err).__name__)}"))
        raise
