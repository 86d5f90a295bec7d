"""What the GRPO job runs on the Ray head (shipped as the job's working_dir, so it holds only
that): the runner (run_grpo.py: training, then the export), the model export (export_model.py)
and the export's evaluation (evaluate.py with eval_report.py, eval_backends.py and
eval_scoring.py). Standard library only at module level; each module imports its siblings by
plain name when run as a script from this folder."""
