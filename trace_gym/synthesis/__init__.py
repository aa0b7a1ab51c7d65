"""Step 2 of TRACE: capability environments synthesised into a plugin package.

* ``emit.py`` and ``templates/``: ``trace synthesize`` renders one sub-package per capability with Jinja2: the
  env derived from the target (``trace_gym.derived``) for a capability the target declares;
* ``from_target.py``: what emission reads from a protocol target (declared capabilities, sources, an example);
* ``static_check.py`` and ``sandbox.py``: validation that trusts nothing (AST allowlist, then ``trace check``
  in a resource-limited subprocess under an audit hook);
* ``generation_agent.py``: the LLM generation agent for capabilities the target does not declare;
* ``isolation.py``: the isolation matrix of the "oracle minus one capability" agents;
* ``calibration.py``: ``trace calibrate``, difficulty picked against TRACE's bands with the real policy.
"""
