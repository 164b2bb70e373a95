"""`python -m sandbox`: run both servers until SIGTERM/SIGINT, announcing them as one JSON line."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading

from .config import CAPTCHAAI_KINDS, ENDPOINTS, SANDBOX_KEY, SHAPES, VARIANTS, FaultPlan, SandboxConfig
from .portal_data import REGIONS, sitekey_for
from .sandbox import Sandbox


def _solve(text: str) -> dict:
    """fixed:20 | uniform:5:30 | lognormal:MEDIAN:SIGMA -> SandboxConfig fields."""
    name, *nums = text.split(":")
    try:
        values = [float(n) for n in nums]
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad number in {text!r}") from None
    shapes = {
        "fixed": ("solve_s",),
        "uniform": ("solve_min_s", "solve_max_s"),
        "lognormal": ("solve_median_s", "solve_sigma"),
    }
    if name not in shapes or len(values) != len(shapes[name]):
        raise argparse.ArgumentTypeError(f"expected fixed:S, uniform:MIN:MAX or lognormal:MEDIAN:SIGMA, got {text!r}")
    return {"solve": name, **dict(zip(shapes[name], values, strict=True))}


def _fault(text: str) -> tuple[str, float, tuple]:
    """ENDPOINT:RATE[:kind,kind] -> (endpoint, rate, kinds)."""
    parts = text.split(":")
    if len(parts) not in (2, 3) or parts[0] not in ENDPOINTS:
        raise argparse.ArgumentTypeError(f"expected ENDPOINT:RATE[:kind,...], ENDPOINT in {ENDPOINTS}; got {text!r}")
    try:
        rate = float(parts[1])
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad rate in {text!r}") from None
    kinds = tuple(parts[2].split(",")) if len(parts) == 3 else CAPTCHAAI_KINDS
    if set(kinds) - set(CAPTCHAAI_KINDS):
        raise argparse.ArgumentTypeError(f"unknown kind in {text!r}; kinds are {CAPTCHAAI_KINDS}")
    return parts[0], rate, kinds


def _variant(text: str) -> tuple[str, frozenset]:
    """REGION:variant,variant (REGION * for every region) -> (region, variants)."""
    region, _, names = text.partition(":")
    chosen = frozenset(n for n in names.split(",") if n)
    if not region or not chosen or chosen - set(VARIANTS):
        raise argparse.ArgumentTypeError(
            f"expected REGION:variant[,variant...] with variants among {VARIANTS}; got {text!r}"
        )
    return region, chosen


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m sandbox", description=__doc__)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--time-scale", type=float, default=1.0, help="multiplies every sandbox duration")
    p.add_argument(
        "--solve",
        type=_solve,
        default={"solve": "fixed", "solve_s": 20.0},
        help="fixed:S | uniform:MIN:MAX | lognormal:MEDIAN:SIGMA (seconds)",
    )
    p.add_argument("--threads", type=int, default=5, help="plan threads")
    p.add_argument("--unsolvable-sitekey", nargs="+", action="extend", default=[], metavar="REGION_OR_SITEKEY")
    p.add_argument("--unsolvable-rate", type=float, default=0.0)
    p.add_argument("--fault", type=_fault, action="append", default=[], metavar="ENDPOINT:RATE[:kind,kind]")
    p.add_argument("--slow-s", type=float, default=5.0, help="delay of 'slow' faults")
    p.add_argument("--token-validity-s", type=float, default=120.0)
    p.add_argument("--ban-after", type=int, default=10)
    p.add_argument("--ban-s", type=float, default=300.0)
    p.add_argument(
        "--variant",
        type=_variant,
        action="append",
        default=[],
        metavar="REGION:NAME[,NAME]",
        help=f"serve REGION (* for every one) as a real portal would; names: {', '.join(VARIANTS)}",
    )
    p.add_argument(
        "--shape",
        choices=SHAPES,
        default="simple",
        help="the portal's shape: the simplest portal (/export), or daily-report (/reports/daily, docs/portals.md)",
    )
    p.add_argument(
        "--maintenance-pages", type=int, default=2, help="HTML 200 pages before records (variant maintenance)"
    )
    p.add_argument("--captchaai-port", type=int, default=0)
    p.add_argument("--portal-port", type=int, default=0)
    p.add_argument("--ready-file", help="also write the JSON line here (atomically)")
    return p.parse_args(argv)


def config_from_args(args: argparse.Namespace) -> SandboxConfig:
    return SandboxConfig(
        seed=args.seed,
        time_scale=args.time_scale,
        threads=args.threads,
        **args.solve,
        unsolvable_sitekeys=frozenset(sitekey_for(s) if s in REGIONS else s for s in args.unsolvable_sitekey),
        unsolvable_rate=args.unsolvable_rate,
        faults={e: FaultPlan(rate=r, kinds=k, slow_s=args.slow_s) for e, r, k in args.fault},
        token_validity_s=args.token_validity_s,
        ban_after=args.ban_after,
        ban_s=args.ban_s,
        variants={r: v for r, v in args.variant},
        maintenance_pages=args.maintenance_pages,
        shape=args.shape,
        captchaai_port=args.captchaai_port,
        portal_port=args.portal_port,
    )


def _write_atomically(path: str, text: str) -> None:
    """A reader polling for the file never sees it half-written."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        config = config_from_args(args)
    except (TypeError, ValueError) as exc:
        print(f"python -m sandbox: error: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):  # installed before serving: no window to die uncleanly
        signal.signal(sig, lambda *_: stop.set())
    with Sandbox(config) as sb:
        line = json.dumps(
            {"captchaai_url": sb.captchaai_url, "portal_url": sb.portal_url, "key": SANDBOX_KEY, "pid": os.getpid()}
        )
        print(line, flush=True)
        if args.ready_file:
            _write_atomically(args.ready_file, line + "\n")
        while not stop.wait(0.2):  # a timed wait keeps the main thread responsive to signals
            pass
    return 0
