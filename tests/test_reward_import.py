"""The data-prep Job imports the reward file where the Ray pods' image runs it, as verl does
(importlib spec_from_file_location + exec_module: verl/trainer/ppo/reward.py get_custom_reward_fn
v0.6.1, verl/utils/import_utils.py load_extern_object 0.9.0), so a missing package fails there,
before the GPUs are asked for, not at the first reward."""

from __future__ import annotations

from pathlib import Path

import pytest

from config import run_inputs
from config.settings import load_settings
from manifests import data_prep
from payloads import prepare_data
from tests.program import REAL
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
