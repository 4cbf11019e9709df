"""`python -m subagent`: boot a subagent (see `subagent.boot`)."""

import sys

from subagent.boot import main

if __name__ == "__main__":
    sys.exit(main())
