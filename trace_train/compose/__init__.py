"""Step 4: compose capability LoRA adapters under learned token-level top-1 gates.

``model``      routed linears + per-layer gates inside a regular transformers causal LM
``artefact``   loading PEFT adapters into it, the saved artefact (manifest with hashes), exact restore
``data``       gate-training data: labelled successful rollouts of each adapter + base text
``train``      gate training (label CE + LM loss + load balancing), checkpoints, exact resume
``baselines``  task-level zero-shot router, uniform merged average, peft X-LoRA and Arrow
``compare``    paired evaluation of base / adapters / router / MoE on a target, tables and gate chart
``commands``   ``trace compose`` and ``trace compare``
"""
