"""What the GRPO job runs on the Ray head (shipped as the job's working_dir, so it holds only
that): the runner (run_grpo.py: training, then the export) and the model export."""
