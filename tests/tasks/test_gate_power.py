"""The smallest change each gate can see (issue 46.2), checked independently.

Rates: the exact power against an enumeration of every (losses, gains) table with the gate's
own test deciding each; the detectable drop reaches 80% power when simulated. Averages: the
Wilcoxon-based figure from the spread reaches about 80% power when simulated.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from tasks.regression.decide import decide
from tasks.regression.deltas import DeltaLine, paired_data
from tasks.regression.gates import Gate
from tasks.regression.limit_tests import PairedData, beyond_p
from tasks.regression.power import min_detectable_change, rate_power
from tasks.report.junit import junit_xml
from tasks.report.verdict_text import gate_line
from tests.tasks.test_gate_limits import CTX, METRICS, RATE, rate_line


def enumerated_power(n: int, q: float, drop: float, limit: float, level: float) -> float:
    """Σ over every (losses, gains) of its multinomial probability where the test breaches."""
    p_loss, p_gain = (q + drop) / 2, (q - drop) / 2
    total = 0.0
    for losses in range(n + 1):
        for gains in range(n - losses + 1):
            if beyond_p(PairedData(n, losses, gains), limit, "drop") >= level:
                continue
            ways = math.comb(n, losses) * math.comb(n - losses, gains)
            total += ways * p_loss**losses * p_gain**gains * (1 - q) ** (n - losses - gains)
    return total


@pytest.mark.parametrize(("n", "q", "drop"), [(20, 0.3, 0.2), (30, 0.2, 0.1), (25, 0.5, 0.3)])
def test_rate_power_matches_an_enumeration_of_every_table(n, q, drop):
    assert rate_power(n, q, drop, 0.02, 0.05) == pytest.approx(
        enumerated_power(n, q, drop, 0.02, 0.05), abs=1e-9)


def test_the_detectable_drop_of_a_rate_reaches_its_power_when_simulated():
    n, q, level = 200, 0.2, 0.05
    sees = min_detectable_change(PairedData(n, 20, 20), 0.02, level)
    rng = np.random.default_rng(4)
    runs, breaches = 400, 0
    for _ in range(runs):
        losses, gains, _ = rng.multinomial(n, [(q + sees) / 2, (q - sees) / 2, 1 - q])
        breaches += beyond_p(PairedData(n, int(losses), int(gains)), 0.02, "drop") < level
    assert abs(breaches / runs - 0.8) <= 3 * (0.8 * 0.2 / runs) ** 0.5


def test_the_detectable_drop_of_an_average_reaches_about_its_power_when_simulated():
    n, sd, limit, level = 40, 0.2, 0.05, 0.05
    rng = np.random.default_rng(8)
    observed = rng.normal(0, sd, size=n)
    sees = min_detectable_change(paired_data(np.zeros(n), observed), limit, level)
    runs, breaches = 300, 0
    for _ in range(runs):
        candidate = rng.normal(-sees, sd, size=n)
        data = paired_data(np.zeros(n), candidate)
        breaches += beyond_p(data, limit, "drop") < level
    # the spread is estimated from one sample of 40: within ten points of 80%
    assert 0.7 <= breaches / runs <= 0.9


def test_a_small_set_says_what_it_cannot_see_in_every_view():
    gate = Gate(metric=RATE, max_drop=0.02, alpha=0.05)
    verdict = decide([gate], METRICS, [rate_line(12, 6, 0)], CTX)
    record = verdict.gates[0]._asdict()
    assert record["min_detectable_change"] > 0.3 and record["limit"] == 0.02
    line = gate_line(record)
    assert "this set cannot detect a drop of 4 pp (twice the limit); it sees drops of" in line
    section = {"outcome": verdict.outcome, "gates": [record], "baseline_run_id": "b"}
    root = ET.fromstring(junit_xml(section, "s"))
    assert "cannot detect a drop of 4 pp" in "".join(root.itertext())
    big = decide([gate], METRICS, [rate_line(2000, 20, 20)], CTX).gates[0]._asdict()
    assert "cannot detect" not in gate_line(big) and "sees drops of" in gate_line(big)


def test_a_line_without_an_alpha_has_no_detectable_change():
    line = DeltaLine(RATE, None, 1.0, 0.5, -0.5, None, None, 12, 0, 0, 0, None, None, None,
                     "mcnemar-exact", 6, 0, None, None, False)
    result = decide([Gate(metric=RATE, max_drop=0.02)], METRICS, [line], CTX).gates[0]
    assert result.min_detectable_change is None
