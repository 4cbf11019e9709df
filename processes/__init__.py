"""Linux process primitives, child pipes and the kill ladder, shared by the supervisor and the subagent.

`linux` (prctl, pidfds; ctypes/os/signal only), `pipes` (a child's stdio pipes and the
non-blocking read loop), `ladder` (the pure plan) and `climb` (its anyio driver). Standard
library and anyio only; no agentd, subagent or pydantic imports.
"""
