"""The fabric check job. This folder is the job's Ray working_dir: keep only its files here."""
