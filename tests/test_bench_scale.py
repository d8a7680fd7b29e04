"""The scaling projection behind docs/performance.md's table (bench/scale.py), checked by hand."""

from bench.scale import SERVER_IDLE_BASE, SERVER_IDLE_PER_WORKER, projection

# Figures of one bench.scale run (2026-11-25, load 0.7), in ms per call.
MEASURED = {"ms_per_call": {"single": 7.397, "shards": 7.425, "server": 0.648,
                            "server_net": 0.16356, "parent": 0.239}}


def test_each_machine_adds_two_shards_bound_by_their_concurrency_until_the_centre():
    rows = {row["machines"]: row for row in projection(MEASURED)}
    # A shard: min(128 calls in flight / 1 s, 1000 / 7.425 ms = 134.7/s) = 128/s; 2 a machine.
    assert [rows[n]["calls_per_second"] for n in (1, 2, 4, 8, 16)] == [256, 512, 1024, 2048,
                                                                       4096]
    assert all(rows[n]["bound_by"] == "workers" for n in (1, 2, 4, 8, 16))
    # 64 machines: the server has 1 - 0.020 - 0.005 * 64 = 0.66 of its core for calls at
    # 0.16356 ms each: 4,035/s, below both the workers (16,384/s) and the parent (1/0.239 ms).
    assert SERVER_IDLE_BASE == 0.020 and SERVER_IDLE_PER_WORKER == 0.005
    assert rows[64]["calls_per_second"] == round(0.66 * 1000 / 0.16356)
    assert rows[64]["bound_by"] == "Prefect server" and rows[64]["server_busy"] == 1.0
    # 16 machines: 4,096 calls/s * 0.16356 ms + 0.020 + 0.080 = 77 % of the server's core.
    assert rows[16]["server_busy"] == round(4096 * 0.16356 / 1000 + 0.100, 2)
