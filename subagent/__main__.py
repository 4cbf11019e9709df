"""`python -m subagent`: boot a subagent (see `subagent.boot`)."""

from subagent.boot import exit_now, main

if __name__ == "__main__":
    exit_now(main())
