"""python -m canal_core.binlog: the canal-binlog command."""

import sys

from .cli import main

sys.exit(main())
