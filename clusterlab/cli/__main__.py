"""``python -m clusterlab.cli``: the ``clusterlab`` command."""

import sys

from clusterlab.cli import main

sys.exit(main())
