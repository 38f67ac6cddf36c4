"""Running a measurement script in a fresh Python process and reading its peak memory."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

#: Source of ``peak_rss()`` for scripts run in a child process.  VmHWM restarts at exec;
#: ``ru_maxrss`` would carry the parent's peak over fork and exec and hide all growth.
PEAK_RSS = textwrap.dedent(
    """
    def peak_rss():
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    """
)


def run_script(script: str, *args: str) -> dict:
    """Run ``PEAK_RSS`` + ``script`` with ``args``; return the JSON its last line prints."""
    result = subprocess.run(
        [sys.executable, "-c", PEAK_RSS + textwrap.dedent(script), *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])
