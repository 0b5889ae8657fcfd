"""``python -m streams.cli``: the same as the ``combee`` command."""

import sys

from streams.cli import main

if __name__ == "__main__":
    sys.exit(main())
