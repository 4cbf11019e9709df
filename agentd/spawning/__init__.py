"""Starting subagent processes: the exec and zygote spawners, cgroup leaves and the orphan sweep."""
