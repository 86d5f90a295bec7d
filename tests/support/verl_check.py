"""Start a check script in a verl virtualenv with its JSON request on stdin.

The request goes in as a file, not a pipe: each script reads all of stdin before it imports verl
(seconds: torch, ray, transformers), so several started one after another run at once instead of
waiting for their pipes to be fed in turn.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def start_check(python: Path, script: Path, request: dict[str, Any]) -> subprocess.Popen[str]:
    """`python script` running from the repository root, reading `request`; text stdout/stderr."""
    with tempfile.TemporaryFile("w+") as stdin:
        json.dump(request, stdin)
        stdin.seek(0)
        # The child holds its own descriptor once started.
        return subprocess.Popen(
            [str(python), str(script)],
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
