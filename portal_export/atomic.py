"""Small state files written whole or not at all, for readers in other processes and runs."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path


def write_json(path: str | os.PathLike[str], obj: object) -> None:
    """`obj` as JSON at `path`, through a private temporary file beside it and a rename."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}-")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(obj, f)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
