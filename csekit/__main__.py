"""``python -m csekit`` is the ``csekit`` command."""

import sys

from .cli import main

sys.exit(main())
