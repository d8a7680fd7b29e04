"""Agreement between a judge and people.

The statistics (kappa and its interval), the labels of rows, and the policy deciding when a
calibration vouches for a judge. May import judges/ top-level modules and judges/pairwise
(calibrating the pairwise judge).
"""
