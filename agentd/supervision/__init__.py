"""Supervising tasks: the scheduler, one task's run and tree, the supervised child, liveness."""
