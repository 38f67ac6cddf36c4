"""A pytest plugin that scripts/array_api_tests.sh loads into data-apis/array-api-tests' run.

Hypothesis neither shrinks nor explains failing examples: oocarr's ops write every
intermediate to storage, so shrinking one failure took minutes; each failure is reported with
the first example found instead.  The suite's own profile, registered later, inherits this.
"""

from hypothesis import Phase, settings

settings.register_profile("oocarr-array-api", phases=(Phase.explicit, Phase.reuse, Phase.generate))
settings.load_profile("oocarr-array-api")
