"""The operator's commands (`python -m ops COMMAND`, behind every `make` target) and the run around
`luigi.build`: the cap that follows the plan, takeover of a dead host's regions, alerts, luigid."""


class UsageError(ValueError):
    """Refused arguments, environment or days, said in one line before anything runs (exit 2)."""
