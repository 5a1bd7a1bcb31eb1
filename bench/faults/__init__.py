"""The helpers of ``bench/faults.py``: its agents, the wrapper its subprocesses run, its harness.

``agents``: the agents the fault cases run (``--agent bench.faults.agents:NAME``).
``child``: what every agent process runs (``python -m bench.faults.child tether ARGS...``):
the real ``tether`` command, with a record of every append that returned, and optionally a
full disk. ``harness``: spawning and watching those processes, another process's write
lock, and reading the store afterwards.
"""
