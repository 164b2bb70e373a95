"""What a test configures: the key it uses, the fast sandbox and client, and the one writer of
layered luigi.cfg files (a test's own process layers keys with the `luigi_cfg` fixture)."""

from tests.helpers.speed import scaled

TEST_KEY = "testkey0123456789abcdef012345678"  # 32 characters, as CaptchaAI's keys

# The sandbox at a hundredth of real time and a client polling to match: a 5 s solve takes 50 ms.
# What only bounds a wait is scaled by the speed factor (tests/helpers/speed.py): a token's life from
# its solve to its post (1.2 s), a solve's deadline (3 s) and an HTTP answer's (2 s); a test that
# means one to pass sets its own.
FAST_SANDBOX = dict(seed=3, time_scale=0.01, solve="fixed", solve_s=5.0, token_validity_s=scaled(120.0))
FAST_CLIENT = {
    "captchaai": {"first_poll_s": 0.04, "poll_every_s": 0.02, "timeout_s": scaled(3), "http_timeout_s": scaled(2)},
    "portal": {"retry_base_s": 0.05, "retry_jitter_s": 0.02},
}


# The sandbox's daily-report portal (SandboxConfig(shape="daily-report")) described by [portal] keys alone:
# each region one of its market codes.
MARKET = {"north": "NE-01", "south": "SE-02", "east": "SW-03", "west": "NW-04"}
DAILY_REPORT = {
    "export_page": "/reports/daily",
    "export_fields": "report_date={day:DD.MM.YYYY}, market={region}",
    "region_values": ", ".join(f"{region}={code}" for region, code in MARKET.items()),
    "record_checks": "date={day:DD.MM.YYYY}, market={region}",
}


def polls(solve_s):
    """The client's poll schedule for solves of about `solve_s` seconds (at the test's time), in
    CaptchaAI's proportions (first poll at 15 s, then every 5 s, for solves of about 20 s): a poll or
    two per solve, as in production. A test that lengthens the solves to open a window mid-run uses
    it, rather than polling each solve a hundred times at FAST_CLIENT's 20 ms, which is CPU the
    whole suite shares on 2 cores."""
    return {"first_poll_s": round(0.75 * solve_s, 3), "poll_every_s": round(0.25 * solve_s, 3)}


def polled(sections, solve_s):
    """`sections` (a layered config's) with the poll schedule of polls(solve_s)."""
    return {**sections, "captchaai": {**sections.get("captchaai", {}), **polls(solve_s)}}


def cfg_text(sections):
    """The text of a layered luigi.cfg: {section: {key: value}}."""
    return "".join(f"[{s}]\n" + "".join(f"{k} = {v}\n" for k, v in keys.items()) for s, keys in sections.items())


def write_cfg(path, sections):
    """A layered luigi.cfg (for LUIGI_CONFIG_PATH of subprocesses)."""
    path.write_text(cfg_text(sections))
    return path
