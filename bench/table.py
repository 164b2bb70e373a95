"""The printed tables, and bench/results.md, which holds exactly what was printed.

results.md keeps its hand-written prose; only the blocks between the markers of a mode are replaced,
so `make bench` and `make bench-scale` each leave the other's numbers alone.
"""

import re
from pathlib import Path

from . import config

RESULTS = Path(__file__).with_name("results.md")
AGE_LIMIT_S = config.POLL_EVERY_S + 1.0


def _f(value, fmt=".2f"):
    return "-" if value is None else f"{value:{fmt}}"


def _check(ok):
    return " ok" if ok else " MISSED"


def _render(header, rows):
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def line(cells):
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])


def side_by_side(columns):
    """columns: [(title, summary, record)]; the first two are the pipeline without and with faults."""
    target = {
        "ratio": ("<= 1.05, faults 1.10", lambda s, r: s["ratio"] <= (1.10 if r["faults"] else 1.05)),
        "utilisation": (">= 0.90, faults 0.92", lambda s, r: s["utilisation"] >= (0.92 if r["faults"] else 0.90)),
        "peak": ("<= cap, = cap", lambda s, r: s["peak_threads"] == r["cap"]),
        "solves": ("<= 1.10 (faults)", lambda s, r: (s["solves_per_region"] or 99) <= 1.10),
        "age": (f"<= {AGE_LIMIT_S:g} s (no faults)", lambda s, r: s["over_age_limit"] == 0),
    }

    def judged(key, text, s, r, col):
        """The pipeline's columns carry the verdict of the targets that apply to them."""
        applies = {"ratio": True, "utilisation": True, "peak": col < 2, "solves": col == 1, "age": col == 0}
        return text + _check(target[key][1](s, r)) if col < 2 and applies[key] else text

    rows = []

    def row(label, key, cell):
        cells = [label, target[key][0] if key else ""]
        for col, (_, s, r) in enumerate(columns):
            text = cell(s, r)
            cells.append(judged(key, text, s, r, col) if key else text)
        rows.append(cells)

    row("days x regions: delivered / asked", None, lambda s, r: f"{r['days']}d: {s['regions']}")
    row("exit code", None, lambda s, r: str(r["exit"]))
    row("solves in flight at most (design)", None, lambda s, r: str(r.get("concurrency", r["cap"])))
    row("makespan s (command start to exit)", None, lambda s, r: _f(s["makespan_s"], ".1f"))
    row("lower bound s at cap 4: max(sum p/cap, max p)", None, lambda s, r: _f(s["lower_bound_s"], ".1f"))
    row("makespan / lower bound", "ratio", lambda s, r: _f(s["ratio"], ".3f"))
    row("  same, at the design's own concurrency", None, lambda s, r: _f(s["own_ratio"], ".3f"))
    row("slot utilisation (delivering solves)", "utilisation", lambda s, r: _f(s["utilisation"], ".3f"))
    row("peak CaptchaAI threads in use", "peak", lambda s, r: f"{s['peak_threads']} of cap {r['cap']}")
    row("solves submitted per delivered region", "solves", lambda s, r: _f(s["solves_per_region"], ".3f"))
    row(
        "res.php calls per solve / schedule minimum",
        None,
        lambda s, r: f"{_f(s['polls_per_solve'], '.2f')} / {_f(s['polls_vs_min'], '.3f')}x",
    )
    row(
        "token age at post s: max (p50), over limit",
        "age",
        lambda s, r: f"{_f(s['token_age_max_s'])} ({_f(s['token_age_p50_s'])}), {s['over_age_limit']}",
    )
    row("added per region s: slot time beyond p(s)", None, lambda s, r: _f(s["added_per_region_s"], ".3f"))
    row("  startup s (start to first submit)", None, lambda s, r: _f(s["startup_s"]))
    row("  handoff s (post to next submit, mean)", None, lambda s, r: _f(s["handoff_s"], ".3f"))
    row("  poll and post lag s (mean)", None, lambda s, r: _f(s["lag_s"], ".3f"))
    row("  tail s (last post to exit)", None, lambda s, r: _f(s["tail_s"]))
    row("  end idle slot-s (slots out of work)", None, lambda s, r: _f(s["end_idle_s"], ".1f"))
    row(
        "peak MB per task process: RSS (USS)",
        None,
        lambda s, r: (
            f"{_f(r['mem']['task_rss_mb'], '.1f')} ({_f(r['mem']['task_uss_mb'], '.1f')})"
            if r["mem"]["task_processes"]
            else "- (threads)"
        ),
    )
    row(
        "main process: peak RSS MB, CPU s",
        None,
        lambda s, r: f"{_f(r['mem']['main_rss_mb'], '.1f')}, {_f(r['cpu']['main_s'], '.1f')}",
    )
    row("machine load (1 min average) at the end", None, lambda s, r: _f(r.get("load"), ".1f"))
    return _render(["measure", "target", *[title for title, _, _ in columns]], rows)


def store_table(columns, target):
    """The data dir on the local disk beside the same run into an object store: makespan, and what
    the store was asked."""
    (_, local, _), (_, remote, record) = columns
    ratio = remote["makespan_s"] / local["makespan_s"] if local["makespan_s"] else None
    asked = record["store_requests"] or {}
    delivered = len(record["delivered"])
    rows = [
        ["regions delivered / asked", local["regions"], remote["regions"]],
        ["exit code", str(columns[0][2]["exit"]), str(record["exit"])],
        ["makespan s", _f(local["makespan_s"], ".1f"), _f(remote["makespan_s"], ".1f")],
        [
            f"makespan / local disk's (target <= {target:g})",
            "1",
            _f(ratio, ".3f") + _check(ratio is not None and ratio <= target),
        ],
        ["makespan / lower bound", _f(local["ratio"], ".3f"), _f(remote["ratio"], ".3f")],
        ["peak CaptchaAI threads in use", f"{local['peak_threads']} of cap 4", f"{remote['peak_threads']} of cap 4"],
        ["store requests (S3, all processes)", "-", str(sum(asked.values()))],
        ["  by type", "-", ", ".join(f"{k} {n}" for k, n in sorted(asked.items())) or "-"],
        ["store requests per delivered region", "-", _f(sum(asked.values()) / delivered if delivered else None, ".1f")],
    ]
    return _render(["measure", "local disk", "S3 store (SeaweedFS)"], rows)


def plan_table(columns):
    """The another-consumer pair: what the cap following the plan changes beside the fixed cap."""
    rows = []

    def row(label, cell):
        rows.append([label, *[cell(s, r) for _, s, r in columns]])

    row("days delivered / asked", lambda s, r: f"{s['days_ok']}/{r['days']}")
    row("regions delivered / asked", lambda s, r: s["regions"])
    row("exit code", lambda s, r: str(r["exit"]))
    row("refused submits (busy threads)", lambda s, r: str(s["refused"]))
    row("solves submitted per delivered region", lambda s, r: _f(s["solves_per_region"], ".3f"))
    row("makespan s", lambda s, r: _f(s["makespan_s"], ".1f"))
    row("lower bound s, threads actually free", lambda s, r: _f(s["free_bound_s"], ".1f"))
    row("makespan / that bound", lambda s, r: _f(s["free_ratio"], ".3f"))
    row(
        "peak plan threads in use (ours + other)",
        lambda s, r: f"{s['peak_threads']} of {r['stats']['threads']['limit']}",
    )
    row("cap changes, s below the configured cap", lambda s, r: f"{s['cap_changes']}, {s['seconds_below_cap']:.1f}")
    return _render(["another consumer holds 2 threads for a third", *[title for title, _, _ in columns]], rows)


def scale_table(columns):
    rows = []
    for title, s, r in columns:
        luigid = r.get("luigid")
        rows.append(
            [
                title,
                r["cap"],
                f"{r['days']}d: {s['regions']}",
                _f(s["makespan_s"], ".1f"),
                _f(s["lower_bound_s"], ".1f"),
                _f(s["ratio"], ".3f"),
                _f(s["utilisation"], ".3f"),
                f"{s['peak_threads']}/{r['cap']}",
                _f(s["startup_s"]),
                _f(s["handoff_s"], ".3f"),
                _f(s["end_idle_s"] / (r["cap"] * s["makespan_s"]), ".3f"),
                _f(r["cpu"]["main_s"], ".1f"),
                _f(luigid and luigid["cpu_s"], ".1f"),
                _f(r["mem"]["main_rss_mb"], ".0f"),
                _f(luigid and luigid["rss_mb"], ".0f"),
                f"{_f(r['mem']['task_rss_mb'], '.0f')} ({_f(r['mem']['task_uss_mb'], '.1f')})",
                _f(r.get("load"), ".1f"),
            ]
        )
    header = [
        "run",
        "cap",
        "delivered",
        "makespan s",
        "bound s",
        "ratio",
        "util",
        "peak",
        "startup s",
        "handoff s",
        "end idle",
        "worker CPU s",
        "luigid CPU s",
        "worker RSS MB",
        "luigid RSS MB",
        "task RSS (USS) MB",
        "load",
    ]
    return _render(header, rows)


def write_results(mode, text):
    """Replace this mode's block of results.md with `text` (created from scratch if need be)."""
    begin, end = f"<!-- bench:{mode}:begin -->", f"<!-- bench:{mode}:end -->"
    block = f"{begin}\n{text.rstrip()}\n{end}"
    old = RESULTS.read_text() if RESULTS.exists() else "# Bench results\n"
    pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.S)
    new = pattern.sub(lambda _: block, old) if pattern.search(old) else old.rstrip() + "\n\n" + block + "\n"
    RESULTS.write_text(new)


def fleet_table(columns, target, list_target=None):
    """Fleet runs side by side, the first column one host: the ratio to the floor against the one
    host's (or, given `list_target`, to the list-schedule floor), the cap over all hosts, and each
    host's share of the work and of memory."""
    base = next((s["ratio"] for _, s, r in columns if len(r["hosts"]) == 1), None)
    rows = []

    def row(label, cell):
        rows.append([label, *[cell(s, r) for _, s, r in columns]])

    def vs_one_host(s):
        rel = s["ratio"] / base if s["ratio"] and base else None
        return _f(rel, ".3f") + _check(rel is not None and rel <= target)

    def per_host(cell):
        return lambda s, r: ", ".join(cell(h) for h in r["hosts"])

    row("hosts x workers each", lambda s, r: f"{len(r['hosts'])} x {r['workers']}")
    row("days x regions: delivered / asked", lambda s, r: f"{r['days']}d: {s['regions']}")
    row("exit code per host", per_host(lambda h: str(h["exit"])))
    row("regions run per host", per_host(lambda h: str(h["regions_run"])))
    row("solves submitted per delivered region", lambda s, r: _f(s["solves_per_region"], ".3f"))
    row("makespan s (first host start to last exit)", lambda s, r: _f(s["makespan_s"], ".1f"))
    row("floor s: max(sum p/cap, max p)", lambda s, r: _f(s["lower_bound_s"], ".1f"))
    row("makespan / floor", lambda s, r: _f(s["ratio"], ".3f"))
    if base is not None:
        row(f"  / the one host's (target <= {target:g})", lambda s, r: vs_one_host(s))
    row("list-schedule floor s: these solves in order, no overhead", lambda s, r: _f(s["list_schedule_s"], ".1f"))
    if list_target is not None:
        row(
            f"makespan / list-schedule floor (target <= {list_target:g})",
            lambda s, r: (
                _f(s["list_ratio"], ".3f") + _check(s["list_ratio"] is not None and s["list_ratio"] <= list_target)
            ),
        )
    else:
        row("makespan / list-schedule floor", lambda s, r: _f(s["list_ratio"], ".3f"))
    row(
        "  from the first submit: (makespan - startup) / floor",
        lambda s, r: _f((s["makespan_s"] - s["startup_s"]) / s["lower_bound_s"] if s["lower_bound_s"] else None, ".3f"),
    )
    row("slot utilisation (delivering solves)", lambda s, r: _f(s["utilisation"], ".3f"))
    row(
        "peak solves in flight at the sandbox",
        lambda s, r: f"{s['peak_threads']} of cap {r['cap']}" + _check(s["peak_threads"] <= r["cap"]),
    )
    row(
        "cap log: changes written (all hosts), lowest cap",
        lambda s, r: f"{len(r['cap_changes'])}, {min((c['cap'] for c in r['cap_changes']), default='-')}",
    )
    row("  startup s, handoff s (mean)", lambda s, r: f"{_f(s['startup_s'])}, {_f(s['handoff_s'], '.3f')}")
    row("peak MB per host tree: RSS (USS)", per_host(lambda h: f"{h['tree_rss_mb']:.0f} ({h['tree_uss_mb']:.0f})"))
    row("  processes in the tree at its RSS peak", per_host(lambda h: str(h["tree_processes"])))
    row(
        "CPU s per host: its CLI / its whole tree",
        per_host(lambda h: f"{h['main_cpu_s']:.1f} / {h['total_cpu_s']:.1f}"),
    )
    row(
        "CPU s in all: hosts' trees + luigid",
        lambda s, r: f"{sum(h['total_cpu_s'] for h in r['hosts']) + r['luigid']['cpu_s']:.1f}",
    )
    row("luigid CPU s, peak RSS MB", lambda s, r: f"{r['luigid']['cpu_s']:.1f}, {r['luigid']['rss_mb']:.0f}")
    row("machine load (1 min average) at the end", lambda s, r: _f(r.get("load"), ".1f"))
    return _render(["measure", *[title for title, _, _ in columns]], rows)
