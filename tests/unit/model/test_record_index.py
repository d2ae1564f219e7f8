"""RecordIndex: lookups by record id as a dict of the entries would answer them (last listing wins)."""

import random
from types import SimpleNamespace

from frexport.model.record_index import RecordIndex


def test_lookups_and_newest_are_those_of_a_dict_of_the_entries():
    rng = random.Random(11)
    for _ in range(3000):
        rids = sorted(rng.sample(range(80), rng.randint(0, 25)))
        if rng.random() < 0.2:
            rids += rng.sample(rids, min(len(rids), rng.randint(0, 3)))  # listed twice: a corrupt dump
        if rng.random() < 0.2:
            rng.shuffle(rids)
        entries = tuple(SimpleNamespace(record_id=r, n=i) for i, r in enumerate(rids))
        want = {e.record_id: e for e in entries}
        index = RecordIndex(entries)
        for rid in range(-2, 82):
            assert index.get(rid) is want.get(rid)
        assert index.newest() == max(rids, default=-1)
        assert index.ordered == (rids == sorted(set(rids)))
