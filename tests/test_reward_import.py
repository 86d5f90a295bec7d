"""The data-prep Job imports the reward file where the Ray pods' image runs it, as verl does
(importlib spec_from_file_location + exec_module: verl/trainer/ppo/reward.py get_custom_reward_fn
v0.6.1, verl/utils/import_utils.py load_extern_object 0.9.0), so a missing package fails there,
before the GPUs are asked for, not at the first reward."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from config import run_inputs
from config.settings import load_settings
from manifests import data_prep
from payloads import prepare_data
from tests.program import REAL
from tests.support.require import verl_python
from training.assembly import training_job

# Imports the reward file in a child interpreter.
pytestmark = pytest.mark.integration


def test_a_reward_importing_a_missing_package_is_refused_naming_it(tmp_path: Path) -> None:
    reward = tmp_path / "reward.py"
    reward.write_text(
        "import json\nimport verl_gke_no_such_package\n\ndef score(**kw):\n    return 1\n"
    )
    with pytest.raises(prepare_data.StepError) as caught:
        prepare_data.check_reward_imports(reward, None)
    message = str(caught.value)
    assert "No module named 'verl_gke_no_such_package'" in message
    assert "verl would fail at the first reward, on the GPUs" in message
    assert "verl-gke:verlImage" in message


def test_a_reward_importing_what_the_checkout_has_passes(tmp_path: Path) -> None:
    """The job imports verl from the checkout (PYTHONPATH), so the check does too."""
    verl = tmp_path / "verl"
    (verl / "mylib").mkdir(parents=True)
    (verl / "mylib" / "__init__.py").write_text("VALUE = 1\n")
    reward = tmp_path / "reward.py"
    reward.write_text("import mylib\n\ndef score(**kw):\n    return mylib.VALUE\n")
    prepare_data.check_reward_imports(reward, verl)
    with pytest.raises(prepare_data.StepError, match="No module named 'mylib'"):
        prepare_data.check_reward_imports(reward, None)


# A reward file verl v0.6.1 loads: a dataclass under postponed annotations, which needs the module
# in sys.modules while it runs (Python's dataclasses look the class's module up there).
DATACLASS_REWARD = """from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Parsed:
    answer: str


def score(data_source, solution_str, ground_truth, extra_info=None):
    return float(Parsed(solution_str).answer == ground_truth)
"""

# verl 0.6.1's own loader (verl/trainer/ppo/reward.py get_custom_reward_fn), then one score.
VERL_LOADS = """import sys
from omegaconf import OmegaConf
from verl.trainer.ppo.reward import get_custom_reward_fn
config = {"custom_reward_function": {"path": sys.argv[1], "name": "score", "reward_kwargs": {}}}
fn = get_custom_reward_fn(OmegaConf.create(config))
print(fn(data_source="d", solution_str="5", ground_truth="5"))
"""


def test_a_reward_verl_0_6_1_loads_passes_the_check(tmp_path: Path) -> None:
    """verl v0.6.1 (the x86 stacks' verlRef) enters the module in sys.modules as 'custom_module'
    before exec_module, so this file loads there; the Job's import must accept it too."""
    reward = tmp_path / "reward.py"
    reward.write_text(DATACLASS_REWARD)
    python = verl_python("0.6.1")
    verl = subprocess.run(
        [str(python), "-c", VERL_LOADS, str(reward)], capture_output=True, text=True
    )
    assert verl.returncode == 0, verl.stderr[-2000:]
    assert verl.stdout.strip().splitlines()[-1] == "1.0"
    prepare_data.check_reward_imports(reward, None)


@pytest.mark.parametrize(("stack", "imported"), [("a3u", True), ("a4x", False)])
def test_the_job_imports_the_reward_only_in_the_ray_pods_image(stack: str, imported: bool) -> None:
    # a3u: data prep and Ray pods run verlai/verl:vllm011.latest; a4x's Ray pods run an arm64
    # image the x86 data-prep Job cannot (config/profiles.py).
    settings = load_settings(
        stack, {**REAL, "verl-gke:reward": run_inputs.REWARD_EXAMPLE}, offline=False
    ).settings
    assert (settings.data_prep_image == settings.verl_image) is imported
    command = data_prep.command(settings, training_job(settings).spec)
    assert ("--reward-import" in command) is imported
