"""The pairwise rubric judge (Nova style).

Its output models, its prompt, reconciling the two orders of a pair, the Nova metrics and file
format, the length-controlled win rate (length.py), and the stored pair codec. May import
judges/ top-level modules and judges/model.
"""
