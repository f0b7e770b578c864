"""The monitor's core stands alone: the scheduled function runs it, so it imports nothing of the
rest of chalicelib, nothing of sagegate (the CLI side) and no AWS SDK."""
from __future__ import annotations

import subprocess
import sys


def test_the_core_imports_only_itself_numpy_and_datasketches() -> None:
    code = ("import sys; import chalicelib.monitor.analysis, chalicelib.monitor.records, "
            "chalicelib.monitor.windows; print('\\n'.join(sorted(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=60)
    modules = done.stdout.split()
    ours = [m for m in modules if m.split(".")[0] in ("chalicelib", "sagegate", "app")]
    assert ours and all(m == "chalicelib" or m.startswith("chalicelib.monitor")
                        for m in ours), ours
    assert not [m for m in modules if m.split(".")[0] in ("boto3", "botocore", "chalice")]
    assert "datasketches" in modules and "numpy" in modules
