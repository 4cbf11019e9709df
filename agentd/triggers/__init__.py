"""Reactive triggers (docs/design.md §11; docs/triggers.md): the pure decisions (`plan`), one supervised
resource watcher process (`watcher`) and the manager that turns watcher reports into journaled
tasks (`manager`)."""
