"""Reward functions for tests/test_run_inputs.py: each is accepted or refused by the preflight,
and the test checks that verdict against Python's own binding of verl's keyword call."""


def exact(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return float(solution_str.strip().endswith(str(ground_truth)))


async def exact_async(data_source, solution_str, ground_truth, extra_info=None):
    return 1.0


def by_kwargs(**kwargs):
    return 0.0


def keyword_only(*, data_source, solution_str, ground_truth, extra_info):
    return 0.0


def short(data_source, solution_str):
    return 0.0


def renamed(source, solution, truth, info):
    return 0.0


def positional_only(data_source, solution_str, ground_truth, extra_info, /):
    return 0.0


def needs_more(data_source, solution_str, ground_truth, extra_info, tokenizer):
    return 0.0


def extra_with_default(data_source, solution_str, ground_truth, extra_info, scale=1.0):
    return scale


def shadowed(data_source, solution_str, ground_truth, extra_info):
    return 0.0


def shadowed(data_source):  # noqa: F811  the last definition is what the import binds
    return 0.0
