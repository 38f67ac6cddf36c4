"""``python -m oocarr.cli``: the same as the ``oocarr`` console script."""

from oocarr.cli.main import main

main()
