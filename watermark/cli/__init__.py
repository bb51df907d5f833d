"""The command line of the library (``python -m watermark``, ``awm replay/compare/tune/synth/strategies``)."""
