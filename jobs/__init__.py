"""The GRPO training job: its typed spec and the Ray job that runs it."""
