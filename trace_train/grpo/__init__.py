"""Step 3: seed-grouped GRPO for one LoRA adapter (advantages, losses, checkpoints, the training loop)."""
