"""``python -m index.begen``: generate a BE-Gen workload (see ``--help``)."""

import sys

from index.begen.generator import main

sys.exit(main())
