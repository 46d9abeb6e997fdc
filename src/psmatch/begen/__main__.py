"""``python -m psmatch.begen``: generate a BE-Gen workload (see ``--help``)."""

import sys

from psmatch.begen.cli import main

sys.exit(main())
