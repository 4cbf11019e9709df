"""The agentic loop as pure decision code.

No I/O and no clock reads: state is frozen data, time and the cancel flag come in as
arguments, and `machine` answers "what next?" (`CallModel`, `CallTools`, `Finish`). The async
driver in `subagent.run` executes those actions and feeds the outcomes back.
"""
