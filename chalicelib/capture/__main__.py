"""``python -m chalicelib.capture``: see :mod:`chalicelib.capture.reader`."""
import sys

from chalicelib.capture.reader import main

sys.exit(main())
