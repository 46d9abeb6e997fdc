"""``python -m psmatch``: the ``psmatch`` command (:mod:`psmatch.service.cli`)."""

from psmatch.service.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
