"""The prompt-injection benchmark's suites, model double and runner (see ``bench/injection.py``).

- ``core``: tasks, attacks, injection slots, suites, reading results.
- ``model``: the model double, competent at the task and obedient to injections.
- ``runner``: one run of a task in a fresh world under a policy.
- ``mail``, ``payments``, ``files``: the three tool sets, their worlds, tasks and attacks.
"""
