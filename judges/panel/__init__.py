"""A panel of judge models: each member's verdict, the panel's majority, and how far they agree.

`votes.py` decides a row from its members' verdicts (an error is not a vote; a tie or too few
answers is the row's error); `agreement.py` measures the panel over a run: each member's rate,
pairwise agreement, Fleiss' kappa with its interval, and the share of rows decided by one vote.
Pure functions, no I/O. May import judges/ top-level modules.
"""
