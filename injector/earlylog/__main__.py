"""`python -m earlylog`: the same as the `earlylog` console command."""
import sys

from earlylog.cli.main import main

sys.exit(main())
