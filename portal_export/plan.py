"""Whether a concurrency setting fits a CaptchaAI plan."""


def plan_verdict(threads: int, cap: int, workers: int) -> list[str]:
    """Problems with a cap of `cap` solves and `workers` worker processes on a plan of `threads`."""
    problems: list[str] = []
    if cap > threads - 1:
        problems.append(
            f"[resources] captchaai = {cap} leaves no spare thread on a {threads}-thread plan: "
            f"set it to {max(1, threads - 1)}"
        )
    if workers < cap:
        problems.append(f"{workers} workers cannot fill a cap of {cap} solves: set [core] workers >= {cap}")
    return problems
