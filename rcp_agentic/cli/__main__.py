"""``python -m rcp_agentic.cli``: the ``rcp-agentic`` command."""

import sys

from . import main

sys.exit(main())
