"""Shared run machinery, for rows and pairs alike.

The chunk driver (`run_chunks`), live progress, the run's location and final state, stored
chunks reused on resume, and the start-up timeline. May import tasks/ and judges/.
"""
