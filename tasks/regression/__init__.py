"""Deciding a regression, in pure functions.

Paired deltas, exact paired statistics, the gates file, the decision over gates, and slices by
tag. May import judges/.
"""
