"""The model export step the GRPO job runs after verl's trainer exits 0 (shipped as the job's
working_dir, so it holds only what runs on the head)."""
