"""How often kappa's interval misses the truth at a handful of labels, by simulation.

judges/calibration/stats.py says why the interval is the posterior's (with the row bootstrap's
when wider): at 10 labels the percentile bootstrap's lower bound lies above a true kappa of 0.6
far more often than a 95% interval may, the Jeffreys posterior's under 2.5% of the time. Each
simulated set is 10 (judge, person) labels drawn from cells whose kappa is exactly 0.6.
"""

from __future__ import annotations

import numpy as np

from judges.calibration.stats import bootstrap_kappa, posterior_kappa

TRUE_KAPPA = 0.6
# Both raters say "yes" half the time and agree on 80% of units: kappa (0.8 - 0.5) / 0.5 = 0.6.
CELLS = np.array([0.4, 0.1, 0.1, 0.4])
SETS, LABELS = 400, 10


def _sets() -> list[np.ndarray]:
    rng = np.random.default_rng(2026)
    return [rng.multinomial(1, CELLS, size=LABELS).reshape(LABELS, 2, 2) for _ in range(SETS)]


def test_the_posterior_lower_bound_lies_above_the_true_kappa_in_at_most_a_fortieth_of_sets():
    above = [posterior_kappa(rows.sum(axis=0), seed=i)[0] for i, rows in enumerate(_sets())]
    share = np.mean([low is not None and low > TRUE_KAPPA for low in above])
    assert share <= 0.035  # 2.5% plus two standard errors of 400 simulated sets


def test_the_row_bootstrap_alone_would_miss_it_far_more_often():
    lows = [bootstrap_kappa(rows, seed=i, resamples=500)[0] for i, rows in enumerate(_sets())]
    share = np.mean([low is not None and low > TRUE_KAPPA for low in lows])
    assert share > 0.06  # why the interval is not the bootstrap's alone
