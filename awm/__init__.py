"""The project's root command ``awm``: one command line for the watermark library, the jobs and the tools.

``awm COMMAND ...`` runs a subcommand (:mod:`awm.cli`): the watermark library's ``replay``, ``compare``,
``tune``, ``synth`` and ``strategies`` (:mod:`watermark.cli.main`), the streaming job ``stream``
(:mod:`jobs.stream.cli`), the feeder ``feed`` (:mod:`tools.feed`) and the batch jobs ``backfill``, ``retune``,
``quality`` and ``maintain`` (:mod:`jobs.batch`). Each is also ``python -m MODULE``; ``python -m awm`` is
``awm``. Nothing here imports a subcommand's module before that subcommand runs, so ``awm --help`` and
``awm stream --help`` need neither Spark nor the Java runtime.
"""
