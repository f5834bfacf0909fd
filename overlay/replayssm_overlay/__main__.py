"""`python -m replayssm_overlay` runs the same command line as `replayssm-overlay`."""

from replayssm_overlay.cli import main

raise SystemExit(main())
