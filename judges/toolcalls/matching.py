"""Pairing expected calls with actual calls of the same name, each call in at most one pair.

- Unordered: as multisets, so there are sum over names of min(expected count, actual count)
  pairs.
- Ordered: along a longest common subsequence (LCS) of the two name sequences: the longest
  sequence of names that occurs in both in the same relative order, gaps allowed. A call made
  out of order is then left unpaired on both sides (missing and extra).
Among the pairings with the most pairs, the one with the most pairs that `agrees` (the caller
passes "the arguments match") is taken: a repeated tool must not be paired so as to invent an
argument mismatch that another pairing avoids. Remaining ties go to the earliest calls, so
calls pair in order wherever nothing competes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence


def lcs_pairs(expected: Sequence[str], actual: Sequence[str],
              agrees: Callable[[int, int], bool] = lambda i, j: True) -> list[tuple[int, int]]:
    """Index pairs of a longest common subsequence of two name sequences.

    Among the longest, the one with the most pairs for which `agrees(i, j)` holds; remaining
    ties go to pairing the earliest calls. Dynamic programming over suffixes, O(n·m).
    """
    n, m = len(expected), len(actual)
    best = [[(0, 0)] * (m + 1) for _ in range(n + 1)]  # (pairs, agreeing pairs) of suffixes
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            best[i][j] = max(best[i + 1][j], best[i][j + 1])
            if expected[i] == actual[j]:
                after = best[i + 1][j + 1]
                best[i][j] = max(best[i][j], (after[0] + 1, after[1] + agrees(i, j)))
    pairs, i, j = [], 0, 0
    while i < n and j < m:
        after = best[i + 1][j + 1]
        if expected[i] == actual[j] and best[i][j] == (after[0] + 1, after[1] + agrees(i, j)):
            pairs.append((i, j))
            i, j = i + 1, j + 1
        elif best[i + 1][j] == best[i][j]:
            i += 1
        else:
            j += 1
    return pairs


def _max_matching(lefts: list[int], rights: list[int],
                  agrees: Callable[[int, int], bool]) -> dict[int, int]:
    """A maximum matching expected -> actual over the pairs that agree (augmenting paths)."""
    owner: dict[int, int] = {}  # actual index -> expected index
    for i in lefts:
        _augment(i, rights, agrees, owner)
    return {i: j for j, i in owner.items()}


def _augment(start: int, rights: list[int], agrees: Callable[[int, int], bool],
             owner: dict[int, int]) -> bool:
    """Find an augmenting path from expected call `start` and flip it into `owner`.

    Depth first, each expected call trying a free agreeing call first (so calls pair in order
    when none compete), then the calls it could take from their owners. A path may be as long
    as the calls of one name: walked with a stack of frames, never recursion.
    """
    seen: set[int] = set()

    def enter(i: int) -> tuple[list[int], int | None]:
        candidates = [j for j in rights if j not in seen and agrees(i, j)]
        return candidates, next((j for j in candidates if j not in owner), None)

    candidates, free = enter(start)
    path: list[list] = [[start, iter(candidates), None]]  # [expected, its candidates, taking]
    while path:
        if free is not None:  # the path ends at a free call: each frame takes the next call
            owner[free] = path[-1][0]
            for i, _, j in path[:-1]:
                owner[j] = i
            return True
        frame = path[-1]
        j = next((j for j in frame[1] if j not in seen), None)
        if j is None:  # nothing left to take from this expected call: back up
            path.pop()
            continue
        seen.add(j)
        frame[2] = j
        candidates, free = enter(owner[j])
        path.append([owner[j], iter(candidates), None])
    return False


def multiset_pairs(expected: Sequence[str], actual: Sequence[str],
                   agrees: Callable[[int, int], bool] = lambda i, j: True
                   ) -> list[tuple[int, int]]:
    """Index pairs matching the names as multisets, with the most pairs that `agrees`.

    Per name, a maximum matching of the agreeing pairs, then the calls left over paired in
    order: min(expected count, actual count) pairs per name in all.
    """
    by_name: dict[str, tuple[list[int], list[int]]] = defaultdict(lambda: ([], []))
    for i, name in enumerate(expected):
        by_name[name][0].append(i)
    for j, name in enumerate(actual):
        by_name[name][1].append(j)
    pairs: list[tuple[int, int]] = []
    for lefts, rights in by_name.values():
        paired = _max_matching(lefts, rights, agrees)
        taken = set(paired.values())
        pairs += paired.items()
        pairs += zip([i for i in lefts if i not in paired],
                     [j for j in rights if j not in taken], strict=False)  # the shorter ends
    return sorted(pairs)
