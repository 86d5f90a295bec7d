"""The data-prep Job's payload: prepare_data.py and the modules of its steps. The pod runs them
from a flat folder (/scripts), where this file is not shipped (manifests/data_prep.py)."""
