"""``python -m sagegate.monitor baseline|check ...``."""
from __future__ import annotations

import sys

from sagegate.monitor.cli import main

if __name__ == "__main__":
    sys.exit(main(prog="python -m sagegate.monitor"))
