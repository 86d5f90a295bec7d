"""Reward functions for tests/test_rehearsal.py, called by verl's reward code in the rehearsal."""


def none_when_wrong(data_source, solution_str, ground_truth, extra_info=None):
    """1.0 for a response ending in `#### <ground truth>`; on every other path it falls through
    and returns None, which verl's reward manager cannot put in its reward tensor."""
    if solution_str.strip().endswith(f"#### {ground_truth}"):
        return 1.0
