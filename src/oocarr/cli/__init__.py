"""The ``oocarr`` command: inspect, list and convert stored arrays from the shell.

Built on the public API and the page-store interface only, so every
command works on every registered driver, third-party ones included.
One module per job: :mod:`~oocarr.cli.main` (the command group and global
options), :mod:`~oocarr.cli.inspect`, :mod:`~oocarr.cli.ls`,
:mod:`~oocarr.cli.convert`, :mod:`~oocarr.cli.errors` (exit codes),
:mod:`~oocarr.cli.options` (settings shared by the commands),
:mod:`~oocarr.cli.streaming` (tiles under the memory budget),
:mod:`~oocarr.cli.summary` (``--stats``), :mod:`~oocarr.cli.progress` and
:mod:`~oocarr.cli.output` (formatting).
"""
