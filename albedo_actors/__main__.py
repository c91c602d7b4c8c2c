"""``python -m albedo_actors`` is the ``albedo-mcp`` command line."""

import sys

from .cli import main

sys.exit(main())
