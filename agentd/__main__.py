"""`python -m agentd`: the same as the `agentd` command."""

import sys

from agentd.cli.main import main

sys.exit(main())
