"""Local stand-ins for CaptchaAI and the partner portal, for the demo, tests and benchmarks; beside
them the launchers of local servers (`luigid.py`, `seaweedfs.py`, `hosts.py`) and the demos
(`demo.py`, `demo_fleet.py`). None of it ships in the wheel.

The stand-ins are independent of the project's packages on purpose: they check the project's
client against the protocol, not against the client's own idea of it (tests/repo/test_layout.py).

Protocol choices where the real service leaves room:
- threadsinfo answers its fields bare, json=1 or not: {"threads": "5", "working_threads": N}.
- the 'plaintext' fault ignores json=1 and answers a bare code: CAPCHA_NOT_READY for
  res.php action=get (harmless, the task is untouched), ERROR_SERVER_ERROR otherwise.
- the portal keeps, per session cookie, every (day, region) page it served, and checks
  a token once (like siteverify): a refused token is spent unless the refusal came
  before the token was looked at (no/unknown session, page never served to it).
- fault schedule indexes count requests to the endpoint since its plans were installed
  (start, or configure(faults=...)).
"""

from .config import NO_PLAN_KEY, SANDBOX_KEY, SANDBOX_PASSWORD, SANDBOX_USER, SHAPES, VARIANTS, FaultPlan, SandboxConfig
from .portal_data import REGIONS, expected_csv_records, expected_records, sitekey_for
from .sandbox import Sandbox

__all__ = [
    "Sandbox",
    "SandboxConfig",
    "FaultPlan",
    "SANDBOX_KEY",
    "NO_PLAN_KEY",
    "SANDBOX_USER",
    "SANDBOX_PASSWORD",
    "VARIANTS",
    "SHAPES",
    "REGIONS",
    "expected_csv_records",
    "sitekey_for",
    "expected_records",
]
