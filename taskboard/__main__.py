"""``python -m taskboard``: the same as the ``taskboard`` command."""

import sys

from taskboard._cli import main

if __name__ == "__main__":
    sys.exit(main())
