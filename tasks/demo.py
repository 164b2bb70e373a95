"""`make demo`: the whole job against the built-in sandbox, through the real CLI, tasks and client.

The sandbox runs at a tenth of real time (solves of a few seconds, polls every half second) and
leaves one region unsolvable, so the demo shows a day passing validation with it counted. Output
goes to var/demo/, never to the operator's data/.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from sandbox import SANDBOX_KEY, Sandbox, SandboxConfig, sitekey_for

DAYS = ("2026-09-01", "2026-09-04")  # [start, stop): three days
DEMO_CFG = """\
# Written by `make demo`: CaptchaAI's poll schedule at a tenth of real time.
[captchaai]
first_poll_s = 1.5
poll_every_s = 0.5
timeout_s = 30
[portal]
retry_base_s = 1
retry_jitter_s = 1
"""


def summarize(data_dir: Path) -> tuple[list[str], dict[str, int]]:
    lines: list[str] = []
    totals = {"rows": 0, "solves": 0, "unsolvable": 0}
    for path in sorted(data_dir.glob("portal_records_*.health.json")):
        h = json.loads(path.read_text())
        for k in totals:
            totals[k] += h[k]
        unsolvable = ", ".join(h["unsolvable_regions"]) or "-"
        lines.append(
            f"  {h['day']}  rows {h['rows']:4d}  solves {h['solves']}  unsolvable {h['unsolvable']} ({unsolvable})"
            f"  p95 {h['p95_solve_seconds']:.1f} s"
        )
    return lines, totals


def main() -> int:
    root = Path(os.environ.get("PORTAL_VAR_DIR", "var")) / "demo"
    data_dir = root / "data"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    (root / "demo.cfg").write_text(DEMO_CFG)
    cfg = SandboxConfig(
        seed=7,
        time_scale=0.1,
        solve="lognormal",
        solve_median_s=25.0,
        solve_sigma=0.35,
        unsolvable_sitekeys=frozenset({sitekey_for("east")}),
    )
    with Sandbox(cfg) as sb:
        print(f"demo: sandbox CaptchaAI at {sb.captchaai_url}, portal at {sb.portal_url}", flush=True)
        env = {
            **os.environ,
            "CAPTCHAAI_API_KEY": SANDBOX_KEY,
            "CAPTCHAAI_API_BASE": sb.captchaai_url,
            "PORTAL_BASE_URL": sb.portal_url,
            "PORTAL_DATA_DIR": str(data_dir),
            "LUIGI_CONFIG_PATH": str(root / "demo.cfg"),
            "ALERT_WEBHOOK_URL": "",  # a demo against the sandbox alerts nobody
        }
        with open(root / "luigi.log", "w") as log:
            code = subprocess.run(
                [sys.executable, "-m", "tasks", "backfill", *DAYS], env=env, stdout=log, stderr=subprocess.STDOUT
            ).returncode
        stats = sb.stats()
    said = [line for line in (root / "luigi.log").read_text().splitlines() if line.startswith(("scheduler:", "plan:"))]
    print("\n".join(f"demo: {line}" for line in said))  # which scheduler ran it, and the plan check
    lines, totals = summarize(data_dir)
    print(f"demo: {len(lines)} days exported through RangeDaily --of DayExport (exit {code}):")
    print("\n".join(lines))
    print(
        f"demo: {totals['rows']} rows, {totals['solves']} solves, {totals['unsolvable']} unsolvable regions; "
        f"peak {stats['threads']['peak']} CaptchaAI threads in use (cap 4), "
        f"{stats['key_in_query']} requests with the key in a URL"
    )
    print(f"demo: outputs in {data_dir}/ (portal_records_*.jsonl, *.health.json); Luigi's log in {root / 'luigi.log'}")
    return code


if __name__ == "__main__":
    sys.exit(main())
