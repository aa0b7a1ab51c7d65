"""Step 1 of the pipeline: contrastive capability analysis.

``trace rollout`` collects base-agent trajectories on a target's train split (:mod:`.rollouts`); two
labellers mark every (trajectory, capability) pair NA / PRESENT / LACKING: the env's own requirement checks
(:mod:`.labels`) and an LLM analysis agent (:mod:`.llm_labeller`); :mod:`.aggregate` computes TRACE's
per-run Cov, ER-, ER+ and Delta and keeps the capabilities that pass the thresholds in K of N runs;
:mod:`.selection` writes and validates ``selected_capabilities.json``; :mod:`.report` renders report.md and
report.html. ``trace analyze`` (:mod:`.commands`) runs the whole step. See docs/analysis.md.
"""
