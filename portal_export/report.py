"""The solve-health report: a row per calendar day from the health files, as solve_health.csv and
solve_health.png. A day is `ok` (exported, even after a failed validation), `failed` or `missing`
(no readable health file). No Luigi: it runs on any copy of the data dir.

    python -m portal_export.report [--data-dir DIR] [--out-dir DIR] [--max-unsolvable-ratio X]
"""

import argparse
import datetime
import io
import itertools
import logging
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
import numpy.typing as npt
import pandas as pd
from matplotlib import dates as mdates
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from . import health, store_keys
from .errors import ExportError
from .store import LocalStore, Store

log = logging.getLogger(__name__)

CSV_NAME = "solve_health.csv"
PNG_NAME = "solve_health.png"
ROLLING_DAYS = 7
ROLLING_COLUMN = f"p95_rolling{ROLLING_DAYS}_median"
TABLE_DAYS = 14

COUNT_KEYS = ("solves", "unsolvable", "refused_tokens", "submits", "rows")
FLOAT_KEYS = ("p95_solve_seconds", "unsolvable_ratio", "idle_slot_seconds")
COLUMNS = ("day", "status", "p95_solve_seconds", ROLLING_COLUMN, "unsolvable_ratio", *COUNT_KEYS, "idle_slot_seconds")

COLOR_FAILED = "#d62728"
RATIO_BARS: tuple[dict[str, Any], ...] = (
    {"color": "#9467bd", "label": "unsolvable ratio"},
    {"color": COLOR_FAILED, "label": "unsolvable ratio, failed day"},
)
ROWS_BARS: tuple[dict[str, Any], ...] = (
    {"color": "#17becf", "label": "rows exported"},
    {"facecolor": "none", "edgecolor": COLOR_FAILED, "lw": 1.2, "label": "rows fetched, not exported\n(failed day)"},
)
LEGEND: dict[str, Any] = dict(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9, frameon=False, borderaxespad=0)
MISSING_STYLE: dict[str, Any] = {"facecolor": (0.5, 0.5, 0.5, 0.12), "edgecolor": (0.5, 0.5, 0.5, 0.5), "hatch": "///"}


Data = Store | str | os.PathLike[str]  # a store, or the path of a local directory


class NoHealthFilesError(FileNotFoundError):
    """No readable health file in the data dir: nothing to report on."""


def as_store(data: Data) -> Store:
    """A store as given, or the local directory at a path."""
    return LocalStore(data) if isinstance(data, (str, os.PathLike)) else data


def _numeric(series: pd.Series, integral: bool) -> pd.Series:
    """Numbers only (anything else -> missing); counts as nullable integers when they are whole."""
    values = pd.to_numeric(series.map(lambda v: None if isinstance(v, bool) else v), errors="coerce").astype("float64")
    if integral:
        known = values.dropna()
        if (known == known.round()).all():
            return values.astype("Int64")
    return values


def load_health(data: Data) -> pd.DataFrame:
    """One row per calendar day from the first to the last day seen, with its status and numbers."""
    store = as_store(data)
    data_dir = store.location("").rstrip("/")
    if isinstance(store, LocalStore) and not store.root.is_dir():
        raise NoHealthFilesError(f"no health files: data dir {data_dir} does not exist")
    # day -> (status, health record); an exported day wins over its failed attempt
    by_day: dict[datetime.date, tuple[str, dict[str, Any]]] = {}
    for day, status, key in health.health_keys(store):
        if day in by_day and by_day[day][0] == "ok":
            continue
        record = health.read_health(store, key, tolerate=(OSError, ValueError))
        if record is None:
            continue
        if str(record.get("day", day)) != day.isoformat():
            where = store.location(key)
            log.warning("%s says day %r; reported under %s, the day of its file name", where, record.get("day"), day)
        by_day[day] = (status, record)
    if not by_day:
        raise NoHealthFilesError(
            f"no readable health files (portal_records_YYYY-MM-DD.health.json or "
            f"regions/YYYY-MM-DD/{store_keys.FAILED_HEALTH}) in data dir {data_dir}"
        )

    days = pd.date_range(min(by_day), max(by_day), freq="D")
    records = []
    for ts in days:
        status, record = by_day.get(ts.date(), ("missing", {}))
        records.append({"status": status, **{k: record.get(k) for k in COUNT_KEYS + FLOAT_KEYS}})
    # annotated: pandas-stubs spell these returns `Self`, which mypy makes Any for Python 3.10
    frame: pd.DataFrame = pd.DataFrame.from_records(records, columns=["status", *COUNT_KEYS, *FLOAT_KEYS])
    frame.insert(0, "day", days)
    for key in COUNT_KEYS + FLOAT_KEYS:
        frame[key] = _numeric(frame[key], integral=key in COUNT_KEYS)
    # Rows are consecutive calendar days, so 7 rows are 7 days; days without a p95 are left out.
    frame[ROLLING_COLUMN] = frame["p95_solve_seconds"].rolling(ROLLING_DAYS, min_periods=1).median()
    table: pd.DataFrame = frame[list(COLUMNS)]
    return table


def _runs(mask: Iterable[bool]) -> list[tuple[int, int]]:
    """(start, stop) index pairs of the runs of True."""
    runs, start = [], 0
    for flag, group in itertools.groupby(mask):
        stop = start + len(list(group))
        if flag:
            runs.append((start, stop))
        start = stop
    return runs


Floats = npt.NDArray[np.float64]
Flags = npt.NDArray[np.bool_]


def _floats(series: pd.Series) -> Floats:
    return np.asarray(series.astype("float64").to_numpy(), dtype=np.float64)


def _bar(ax: Axes, x: Floats, values: Floats, where: Flags, **style: Any) -> None:
    """Bars at the days in `where` that have a value; nothing (and no legend entry) otherwise."""
    keep = where & np.isfinite(values)
    if keep.any():
        ax.bar(x[keep], values[keep], **style)


def plot_health(frame: pd.DataFrame, max_unsolvable_ratio: float | None = None) -> Figure:
    """The report figure: p95, unsolvable ratio, solves and refused tokens, rows, over the days."""
    # matplotlib.dates ships no type annotations (matplotlib#26942): its calls are untyped under --strict
    x = np.asarray(mdates.date2num(frame["day"].to_numpy()), dtype=np.float64)  # type: ignore[no-untyped-call]
    first, last = frame["day"].iloc[0], frame["day"].iloc[-1]
    n_days = len(frame)
    counts = frame["status"].value_counts()
    long_range = n_days > 120
    bar_width = 1.0 if long_range else 0.8  # a year of days: bars that touch, no aliasing gaps
    bar_style = {"lw": 0} if long_range else {}
    fig = Figure(figsize=(11, 10), dpi=100, layout="constrained")
    # an array of 4 Axes, which the stubs type as Any for nrows > 1: name the type so the calls are checked
    axes: list[Axes] = list(fig.subplots(4, 1, sharex=True, height_ratios=[3, 2, 2, 2]))
    ax_p95, ax_ratio, ax_solves, ax_rows = axes
    # Failed and missing days across every panel.
    failed_runs = _runs(frame["status"] == "failed")
    missing_runs = _runs(frame["status"] == "missing")
    for ax in axes:
        for a, b in failed_runs:
            ax.axvspan(x[a] - 0.5, x[b - 1] + 0.5, color=COLOR_FAILED, alpha=0.15, lw=0, zorder=0)
        for a, b in missing_runs:
            ax.axvspan(x[a] - 0.5, x[b - 1] + 0.5, lw=0, zorder=0, **MISSING_STYLE)
        ax.grid(True, axis="y", alpha=0.3)
        ax.set_axisbelow(True)
    # p95 solve seconds, and its rolling median.
    p95 = _floats(frame["p95_solve_seconds"])
    failed = (frame["status"] == "failed").to_numpy()
    marker: dict[str, Any] = {"marker": "o", "ms": 4} if n_days <= 120 else {}
    ax_p95.plot(x, p95, color="#1f77b4", lw=1.5, label="p95 solve seconds", **marker)
    median = f"rolling {ROLLING_DAYS}-day median of p95"
    ax_p95.plot(x, _floats(frame[ROLLING_COLUMN]), color="#ff7f0e", lw=2.2, ls="--", label=median)
    if failed.any():
        ax_p95.plot(
            x[failed], p95[failed], ls="none", marker="X", ms=9, color=COLOR_FAILED, label="p95 of a failed day"
        )
    handles, labels = ax_p95.get_legend_handles_labels()
    if failed_runs:
        handles.append(Patch(facecolor=COLOR_FAILED, alpha=0.15, label="failed validation"))
    if missing_runs:
        handles.append(Patch(label="missing (no health file)", **MISSING_STYLE))
    # Unsolvable ratio, against the validation threshold.
    ratio = _floats(frame["unsolvable_ratio"])
    for shown, bars in zip((~failed, failed), RATIO_BARS, strict=True):  # the days that passed, then those that failed
        _bar(ax_ratio, x, ratio, shown, width=bar_width, **{**bar_style, **bars})
    top = np.nanmax(ratio) if np.isfinite(ratio).any() else 0.0
    if max_unsolvable_ratio is not None:
        threshold = f"validation threshold {max_unsolvable_ratio:g}"
        ax_ratio.axhline(max_unsolvable_ratio, color=COLOR_FAILED, ls="--", lw=1.2, label=threshold)
        top = max(top, max_unsolvable_ratio)
    ax_ratio.set_ylim(0, max(0.05, min(1.0, top * 1.25)) if top <= 1 else top * 1.1)
    ax_ratio.yaxis.set_major_formatter(lambda v, _pos: f"{v:.0%}")
    # Solves and refused tokens: side by side, or over a long range a line over the bars.
    solves = _floats(frame["solves"])
    refused = _floats(frame["refused_tokens"])
    every = np.ones(n_days, dtype=bool)
    solves_style = {"color": "#2ca02c", "label": "solves (delivered a region)"}
    if long_range:
        _bar(ax_solves, x, solves, every, width=bar_width, **solves_style, **bar_style)
        if np.isfinite(refused).any():
            ax_solves.step(x, refused, where="mid", color=COLOR_FAILED, lw=1.2, label="refused tokens")
    else:
        half = bar_width / 2
        _bar(ax_solves, x - half / 2, solves, every, width=half, **solves_style)
        _bar(ax_solves, x + half / 2, refused, every, width=half, color=COLOR_FAILED, label="refused tokens")
    for shown, bars in zip((~failed, failed), ROWS_BARS, strict=True):
        _bar(ax_rows, x, _floats(frame["rows"]), shown, width=bar_width, **{**bar_style, **bars})
    for ax, ylabel, title, columns, legend in (
        (ax_p95, "p95 solve (s)", "p95 solve time of the delivering solves", ["p95_solve_seconds"], handles),
        (ax_ratio, "unsolvable", "share of regions given up as unsolvable", ["unsolvable_ratio"], None),
        (ax_solves, "count", "solves and tokens the portal refused", ["solves", "refused_tokens"], None),
        (ax_rows, "rows", "rows in the day's records", ["rows"], None),
    ):
        ax.set_ylabel(ylabel)
        if legend := legend or ax.get_legend_handles_labels()[0]:
            ax.legend(handles=legend, **LEGEND)
        ax.set_title(title, fontsize=10, loc="left")
        if ax in (ax_solves, ax_rows):
            # linear y axes: their locator is an AutoLocator, a MaxNLocator, which takes integer=
            cast(MaxNLocator, ax.yaxis.get_major_locator()).set_params(integer=True)
        if ax is not ax_ratio:
            ax.set_ylim(0, max(1, ax.get_ylim()[1]))
        if not any(np.isfinite(_floats(frame[c])).any() for c in columns):
            ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", va="center", color="#7f7f7f", fontsize=11)
    ax_rows.set_xlim(x[0] - 0.7, x[-1] + 0.7)
    if n_days <= 14:  # ConciseDateFormatter would count hours here
        ax_rows.xaxis.set_major_locator(mdates.DayLocator())  # type: ignore[no-untyped-call]
        ax_rows.xaxis.set_major_formatter(mdates.DateFormatter("%b %d"))  # type: ignore[no-untyped-call]
    else:
        locator = mdates.AutoDateLocator(minticks=4, maxticks=12)  # type: ignore[no-untyped-call]
        ax_rows.xaxis.set_major_locator(locator)
        ax_rows.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))  # type: ignore[no-untyped-call]
    if 14 < n_days <= 92:
        ax_rows.xaxis.set_minor_locator(mdates.DayLocator())  # type: ignore[no-untyped-call]
    summary = ", ".join(f"{counts.get(s, 0)} {s}" for s in ("ok", "failed", "missing") if counts.get(s, 0))
    days = f"{n_days} day{'s' if n_days != 1 else ''}"
    fig.suptitle(f"Solve health {first:%Y-%m-%d} to {last:%Y-%m-%d} ({days}: {summary})", fontsize=13)
    return fig


def build_report(
    data: Data, out_dir: Data | None = None, max_unsolvable_ratio: float | None = None
) -> tuple[Path | str, Path | str, pd.DataFrame]:
    """Write solve_health.csv and solve_health.png, each whole, into `out_dir` (default: the data
    dir's `report/`); return their locations (Paths, or s3:// URLs) and the frame."""
    store = as_store(data)
    frame = load_health(store)
    out, prefix = (store, store_keys.REPORT) if out_dir is None else (as_store(out_dir), "")
    text = frame.to_csv(index=False, date_format="%Y-%m-%d", float_format="%.10g", lineterminator="\n")
    out.write(prefix + CSV_NAME, text.encode("utf-8"))
    buffer = io.BytesIO()
    plot_health(frame, max_unsolvable_ratio).savefig(buffer, format="png")
    out.write(prefix + PNG_NAME, buffer.getvalue())
    where: Callable[[str], Path | str] = Path if isinstance(out, LocalStore) else str
    return where(out.location(prefix + CSV_NAME)), where(out.location(prefix + PNG_NAME)), frame


# (heading, column, format, width): the report's columns, idle_slot_seconds left off
TABLE = (
    ("day", "day", "date", 10),
    ("status", "status", None, 7),
    ("p95_s", "p95_solve_seconds", ".1f", 6),
    ("p95_med7", ROLLING_COLUMN, ".1f", 8),
    ("unsolv", "unsolvable_ratio", ".0%", 6),
    ("solves", "solves", "d", 6),
    ("unsolv_n", "unsolvable", "d", 8),
    ("refused", "refused_tokens", "d", 7),
    ("submits", "submits", "d", 7),
    ("rows", "rows", "d", 7),
)


def _cell(value: Any, fmt: str | None, width: int) -> str:
    if fmt is None:
        return f"{value:<{width}}"
    if fmt == "date":
        return f"{value:%Y-%m-%d}"
    text = "-" if pd.isna(value) else format(round(value) if fmt == "d" else value, fmt)
    return f"{text:>{width}}"


def format_table(frame: pd.DataFrame, days: int = TABLE_DAYS) -> str:
    """The last `days` rows as a fixed-width text table; '-' where a number is unknown."""
    lines = [
        "  ".join(f"{name:<{width}}" if fmt in (None, "date") else f"{name:>{width}}" for name, _, fmt, width in TABLE)
    ]
    for record in frame.tail(days).to_dict("records"):
        lines.append("  ".join(_cell(record[column], fmt, width) for _, column, fmt, width in TABLE))
    return "\n".join(lines)


def _ratio(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text} is not a ratio between 0 and 1")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m portal_export.report",
        description="Write the solve-health report (solve_health.csv and solve_health.png) "
        "from the day health files in the data dir.",
    )
    parser.add_argument(
        "--data-dir",
        metavar="DIR",
        default=os.environ.get("PORTAL_DATA_DIR") or "data",
        help="where the health files are (default: env PORTAL_DATA_DIR, else 'data')",
    )
    parser.add_argument("--out-dir", metavar="DIR", help="where the report goes (default: DATA_DIR/report)")
    parser.add_argument(
        "--max-unsolvable-ratio",
        type=_ratio,
        metavar="X",
        help="draw the validation threshold (luigi.cfg [portal] max_unsolvable_ratio)",
    )
    args = parser.parse_args(argv)
    if "://" in args.data_dir:  # the core reads local directories; the Luigi layer builds object stores
        print(f"error: {args.data_dir} is an object store: run `make report`, which reaches it", file=sys.stderr)
        return 2
    return run(args.data_dir, args.data_dir, args.max_unsolvable_ratio, args.out_dir)


def run(data: Data, where: str, max_unsolvable_ratio: float | None = None, out_dir: Data | None = None) -> int:
    """Build the report of `data` (named `where` in messages), print its last days and where it went."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("warning: %(message)s"))
    loggers = (log, health.log)  # the health records' reader says which files it skipped
    for logger in loggers:
        logger.addHandler(handler)
    try:
        csv_path, png_path, frame = build_report(data, out_dir, max_unsolvable_ratio)
    except (OSError, ExportError) as e:  # NoHealthFilesError: nothing to report on, exit 2
        print(f"error: {e}", file=sys.stderr)
        return 2 if isinstance(e, NoHealthFilesError) else 1
    finally:
        for logger in loggers:
            logger.removeHandler(handler)

    counts = frame["status"].value_counts()
    statuses = ", ".join(f"{counts.get(s, 0)} {s}" for s in ("ok", "failed", "missing"))
    print(f"solve health of {where}, last {min(TABLE_DAYS, len(frame))} of {len(frame)} days ({statuses}):")
    print(f"{format_table(frame)}\ntable: {csv_path}\nplot:  {png_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
