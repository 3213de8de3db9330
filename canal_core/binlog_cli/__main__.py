"""python -m canal_core.binlog_cli: the canal-binlog command."""

import sys

from .command import main

sys.exit(main())
