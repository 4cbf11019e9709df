"""`python -m subagent.watch`: boot a resource watcher (see `subagent.watch.boot`)."""

from subagent.boot import exit_now
from subagent.watch.boot import main

if __name__ == "__main__":
    exit_now(main())
