"""``python -m oocarr.cli``: the same as the ``oocarr`` console script."""

from .main import main

main()
