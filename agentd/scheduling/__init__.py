"""Recurring work (docs/design.md §11): the pure schedule decisions (`plan`) and the scheduler that
drives them from the journal (`driver`)."""
