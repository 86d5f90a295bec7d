"""An exact-match reward for verl (verl-gke:reward docs/examples/exact_match.py:compute_score).

verl calls it once per response with keywords only: data_source, solution_str (the decoded
response), ground_truth (the row's reward_model.ground_truth) and extra_info (the row's
extra_info), and adds the row's score to the response's last token (verl's
NaiveRewardManager). Standard library only: it runs inside verl's reward workers.
"""

import re

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def last_boxed(text: str) -> str | None:
    """The contents of the last \\boxed{...}, nested braces included (\\boxed{\\frac{1}{2}})."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth = 0
    for end in range(start + len("\\boxed"), len(text)):
        depth += {"{": 1, "}": -1}.get(text[end], 0)
        if depth == 0:
            return text[start + len("\\boxed{") : end].strip()
    return None


def final_answer(text: str) -> str | None:
    """The answer after the last `####`, else inside the last \\boxed{}, else the last number."""
    if "####" in text:
        return text.rsplit("####", 1)[1].strip().split("\n")[0].strip() or None
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed
    numbers = _NUMBER.findall(text)
    return numbers[-1] if numbers else None


def normalize(answer: str) -> str:
    return answer.replace(",", "").replace("$", "").strip().rstrip(".").lower()


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """1.0 when the response's final answer equals the ground truth (commas, $ and case aside),
    else 0.0. A ground truth that is a worked solution (GSM8K's `#### 72`, MATH's `\\boxed{}`)
    counts by its own final answer."""
    answer = final_answer(solution_str)
    if answer is None:
        return 0.0
    truth = str(ground_truth)
    if "####" in truth or "\\boxed{" in truth:
        truth = final_answer(truth) or truth
    return 1.0 if normalize(answer) == normalize(truth) else 0.0
