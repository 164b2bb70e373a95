"""`python -m tasks COMMAND`: kept for cron lines written before the commands moved to `python -m ops`."""

import sys

from ops.cli import main

sys.exit(main())
