"""Reading and checking an evaluation set.

Readers per format (streamed and bounded), Pandera validation, normalisation of requests and
traces, row shapes for planning, the labels join and pair sets. May import judges/.
"""
