"""The Luigi layer: `luigi --module tasks DayExport --date YYYY-MM-DD`."""

from .secrets import install_log_scrubber

install_log_scrubber()

from .day import DayExport  # noqa: E402
from .region import RegionExport  # noqa: E402

__all__ = ["DayExport", "RegionExport"]
