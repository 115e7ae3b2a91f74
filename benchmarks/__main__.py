"""Run every benchmark module in turn: ``python -m benchmarks`` (``make bench``).

Each module runs with its own defaults, the sizes behind the figures in docs/benchmarks.md.
"""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path


def main() -> int:
    here = Path(__file__).parent
    failed = []
    for mod in sorted(m.name for m in pkgutil.iter_modules([str(here)])):
        if mod.startswith("_"):
            continue
        cmd = [sys.executable, "-m", f"benchmarks.{mod}"]
        print(f"# python -m benchmarks.{mod}", flush=True)
        if subprocess.run(cmd).returncode != 0:
            failed.append(mod)
    if failed:
        print(f"# failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
