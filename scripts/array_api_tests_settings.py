"""A pytest plugin that scripts/array_api_tests.sh loads into data-apis/array-api-tests' run.

- Hypothesis neither shrinks nor explains failing examples: oocarr's ops write every
  intermediate to storage, so shrinking one failure took minutes; each failure is reported
  with the first example found instead.  The suite's own profile, registered later, inherits
  this.
- Every test starts from Python's ``random`` seeded with its id.  The special-case tests draw
  their one input with Hypothesis' ``.example()``, which shuffles with ``random``; seeded,
  they draw the same input in every run and for every module tested (oocarr.array_api and
  jax.numpy see the same values), as ``--derandomize`` makes the other tests do.
- With ``ARRAY_API_TESTS_RESULTS=PATH`` set, the outcome of every test is written to PATH,
  one ``outcome<TAB>test id`` line per test (outcome ``passed``, ``failed`` or ``skipped``),
  sorted by id, after a ``#`` line of counts: the script compares two modules' files.
"""

from __future__ import annotations

import os
import random
from collections import Counter
from typing import Any

from hypothesis import Phase, settings

settings.register_profile("oocarr-array-api", phases=(Phase.explicit, Phase.reuse, Phase.generate))
settings.load_profile("oocarr-array-api")

#: Each test's outcome, by test id: a failure in any phase (setup, call, teardown) wins.
_OUTCOMES: dict[str, str] = {}


def pytest_runtest_setup(item: Any) -> None:
    random.seed(item.nodeid)


def pytest_runtest_logreport(report: Any) -> None:
    if report.failed:
        _OUTCOMES[report.nodeid] = "failed"
    elif report.skipped:
        _OUTCOMES.setdefault(report.nodeid, "skipped")
    elif report.when == "call":
        _OUTCOMES.setdefault(report.nodeid, "passed")


def pytest_sessionfinish(session: Any, exitstatus: int) -> None:
    path = os.environ.get("ARRAY_API_TESTS_RESULTS")
    if not path or not _OUTCOMES:
        return
    counts = Counter(_OUTCOMES.values())
    module = os.environ.get("ARRAY_API_TESTS_MODULE", "?")
    summary = ", ".join(f"{counts[k]} {k}" for k in ("passed", "failed", "skipped"))
    lines = [f"# {module}: {summary}"]
    lines += [f"{outcome}\t{nodeid}" for nodeid, outcome in sorted(_OUTCOMES.items())]
    with open(path, "w", encoding="utf-8") as out:
        out.write("\n".join(lines) + "\n")
