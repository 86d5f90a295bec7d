"""Stack configuration: the accelerator profile table and the validated stack settings."""
