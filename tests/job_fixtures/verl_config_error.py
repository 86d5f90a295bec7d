"""Stand-in for verl's trainer given an override it refuses: composes verl's own ppo_trainer
config with Hydra, as `python -m verl.trainer.main_ppo <overrides>` does before anything starts,
and fails as Hydra does. Runs in a verl virtualenv; verl's config folder is found without
importing verl (which imports torch).

    <verl venv>/bin/python verl_config_error.py trainer.no_such_key=1
"""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

from hydra import compose, initialize_config_dir

CONFIG_DIR = Path(sysconfig.get_paths()["purelib"]) / "verl" / "trainer" / "config"

if __name__ == "__main__":
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        compose(config_name="ppo_trainer", overrides=sys.argv[1:])
    print("composed: no error", flush=True)
