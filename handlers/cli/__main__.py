"""python -m handlers.cli: the specway command."""

import sys

from handlers.cli.main import main

sys.exit(main())
