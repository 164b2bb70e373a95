import warnings

# Set before Luigi reads its config at import: a LUIGI_CONFIG_PATH naming no file is refused in one line
# (tasks/config_check.py), not warned of and then run on the defaults
warnings.filterwarnings("ignore", "Config file does not exist", UserWarning)

from .cli import main  # noqa: E402

raise SystemExit(main())
