"""Step 2 of TRACE: capability environments synthesised into a plugin package.

* ``catalog/``: deterministic capability families over retail's domain objects (one file per family);
* ``emit.py`` and ``templates/``: ``trace synthesize`` renders one sub-package per capability with Jinja2;
* ``static_check.py`` and ``sandbox.py``: validation that trusts nothing (AST allowlist, then ``trace check``
  in a resource-limited subprocess under an audit hook);
* ``generation_agent.py``: the LLM generation agent for capabilities outside the catalog;
* ``isolation.py``: the isolation matrix of the "oracle minus one capability" agents;
* ``calibration.py``: ``trace calibrate``, difficulty picked against TRACE's bands with the real policy.
"""
