import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from megahour.delivery.ownership import (
    OwnershipError,
    Ring,
    alluxio_modulo_hashes,
    alluxio_modulo_owner,
    key_hash,
    mix64,
    mix64_array,
    spread,
)

names = st.text(st.characters(codec="utf-8", exclude_characters="\0"), min_size=1, max_size=12)
rings = st.lists(names, min_size=1, max_size=12, unique=True).map(Ring.of)
keys = st.tuples(names, st.integers(0, 1 << 40))


def workers(n: int) -> list[str]:
    return [f"gpu-{i:02d}" for i in range(n)]


def test_mix64_array_is_mix64():
    values = [0, 1, (1 << 64) - 1, 0x8000000000000000, 0x0123456789ABCDEF, *range(2, 200, 7)]
    got = mix64_array(np.array(values, dtype=np.uint64)).tolist()
    assert got == [mix64(v) for v in values]


@given(rings, st.lists(keys, min_size=1, max_size=30))
def test_vectorised_owners_agree_with_owner(ring, sample):
    hashes = np.array([key_hash(p, r) for p, r in sample], dtype=np.uint64)
    got = [ring.workers[i] for i in ring.owners(hashes, chunk=7)]
    assert got == [ring.owner(p, r) for p, r in sample]


@given(rings, keys)
def test_ranking_holds_every_worker_once_owner_first(ring, key):
    ranked = ring.ranked(*key)
    assert sorted(ranked) == sorted(ring.workers)
    assert ring.owner(*key) == ranked[0]


@given(st.lists(names, min_size=1, max_size=8, unique=True), keys, st.randoms())
def test_owner_depends_on_the_set_of_workers_not_their_order(names_, key, rnd):
    shuffled = list(names_)
    rnd.shuffle(shuffled)
    assert Ring(tuple(names_)).owner(*key) == Ring(tuple(shuffled)).owner(*key)


@settings(max_examples=50)
@given(st.lists(names, min_size=2, max_size=10, unique=True), st.lists(keys, min_size=1, max_size=50))
def test_removing_a_worker_moves_only_its_keys_to_their_next_rank(names_, sample):
    full, gone = Ring.of(names_), names_[0]
    smaller = Ring.of(names_[1:])
    for key in sample:
        ranked = full.ranked(*key)
        if ranked[0] == gone:
            assert smaller.owner(*key) == ranked[1]
        else:
            assert smaller.owner(*key) == ranked[0]
        # the fallback order while it is down is the same choice
        assert full.owner(*key, exclude=frozenset({gone})) == smaller.owner(*key)


@settings(max_examples=50)
@given(st.lists(names, min_size=2, max_size=10, unique=True), st.lists(keys, min_size=1, max_size=50))
def test_adding_a_worker_moves_keys_only_onto_it(names_, sample):
    before, after = Ring.of(names_[1:]), Ring.of(names_)
    for key in sample:
        assert after.owner(*key) in (before.owner(*key), names_[0])


def test_spread_and_remap_over_64_workers():
    hashes = np.random.default_rng(5).integers(0, 1 << 63, size=400_000, dtype=np.uint64)
    ring = Ring.of(workers(64))
    owners = ring.owners(hashes)
    assert spread(owners, 64) < 1.05
    grown = Ring.of(workers(65))  # gpu-64 is new
    moved = np.mean(np.array(ring.workers)[owners] != np.array(grown.workers)[grown.owners(hashes)])
    assert abs(moved - 1 / 65) < 0.2 / 65


def test_alluxio_modulo_policy_moves_most_keys_when_a_worker_joins():
    blocks = np.arange(20_000, dtype=np.int64) << 24
    hashes = alluxio_modulo_hashes(blocks)
    before, after = hashes % 8, hashes % 9
    assert np.mean(before != after) > 0.8
    assert [workers(8)[i] for i in before[:50]] == [
        alluxio_modulo_owner(int(b), workers(8)) for b in blocks[:50]
    ]


def test_all_workers_excluded_says_what_to_do():
    ring = Ring.of(["a", "b"])
    with pytest.raises(OwnershipError, match="under-store"):
        ring.owner("f", 0, exclude=frozenset({"a", "b"}))
    with pytest.raises(OwnershipError, match="no cache workers"):
        Ring.of([]).owner("f", 0)


def test_duplicate_worker_names_are_refused():
    with pytest.raises(OwnershipError, match="repeat"):
        Ring(("a", "a"))


def test_owner_is_the_same_in_another_process_with_another_hash_seed():
    code = (
        "from megahour.delivery.ownership import Ring;"
        "r = Ring.of([f'gpu-{i}' for i in range(16)]);"
        "print([r.owner(f'ep/{i}.mcap', i % 5) for i in range(40)])"
    )
    ring = Ring.of([f"gpu-{i}" for i in range(16)])
    here = str([ring.owner(f"ep/{i}.mcap", i % 5) for i in range(40)])
    for seed in ("1", "987"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
        )
        assert out.stdout.strip() == here
