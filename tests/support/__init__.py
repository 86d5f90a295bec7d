"""Reusable test infrastructure: local Ray head, GCS emulator, network stand-ins."""
