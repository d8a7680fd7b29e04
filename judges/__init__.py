"""Judges: what a judge is, how rows and pairs are judged, parsed and aggregated.

Top level: the judge concept (base.py: spec, prompt environment, untrusted blocks), rows and
results, the plan, the engine and calls, parsing and echo detection, the reply cache, the
storage door (the only fsspec import), metrics and the published names (judges/result_names/ writes
them). Sub-packages: builtin/ (the judges judgeflow ships), model/ (the one door to models),
pairwise/, calibration/, toolcalls/ (the deterministic tool-call judges). This is the lowest
layer: it imports nothing from tasks/ or flows/.
"""
