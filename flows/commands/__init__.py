"""The `judgeflow` command line: one module per command, and what they share.

Options are declared once (options.py), errors are one line with exit code 2 (common.py), and
the temporary Prefect API boots while the input is checked (prefect_api.py). Only typer is
imported at module level, so `--help` answers in a second; the commands import the rest of
flows/, tasks/ and judges/ when a run starts.
"""
