"""The `agentd` command line: argument parsing and every subcommand."""
