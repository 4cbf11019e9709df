"""The daemon's configuration: files, sections, secrets, checks and the loaded `Config`."""
