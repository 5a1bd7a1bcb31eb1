"""The run engine: what ``AgentRun`` (``tether.loop``) is made of.

- ``context``: the one run context every collaborator shares (spec, log, fold, clock,
  progress); ``base``: the signals between them (``Stop``, ``Retry``, ``Cancelled``) and a
  tool call's plan;
- ``modelstep``: asking the model, bounded and interruptible;
- ``toolcalls`` and ``toolexec``: a turn's tool calls, from intent through the policy to
  their results, and running one call whatever the tool does; ``policypoint``: every
  question the engine asks the policy, in one place;
- ``approving``, ``endings``, ``recovery``: approvals, ending a run, continuing a stored one;
  ``approvalargs``: what an approval binds to, and what redaction left in arguments;
- ``journal``: the append side of the log (seq, time, hash chain, commits to the sinks);
- ``interrupts``: how the run's awaits are interrupted (deadlines, ``cancel()``, Ctrl-C);
- ``watchdog``, ``loopmonitor``: the run's deadline timer, and a blocked event loop seen
  from outside;
- ``unfinished``, ``vault``: calls a stop left without a result, and arguments kept out of
  the log while they wait for approval.

Nothing here is public API: import from ``tether`` (and ``tether.loop``) instead.
"""
