"""A trace's edge facts (rank_trace.EdgeFacts): what its header reads of each entry of its window, and
the header read from them (the first and last enqueue time, the newest event, each group's timeout and
the backends that show events, over the oldest and newest SAMPLE entries). Held to the rules written
out here, with model/_rows.c's loops and without them, on random entries and facts: short and long
windows, absent (None, 0) and negative times, a group's several timeouts, and values no decoder makes
(a bool, an int past 64 bits, a name that is no str), which the compiled loops leave to Python, and more
groups than the compiled loop keeps apart."""

import random
from array import array

import pytest

from frexport.decode.normalize import normalize
from frexport.model import rank_trace
from frexport.model.outcome import SAMPLE
from frexport.model.rank_trace import EdgeFacts, EdgeHeader
from tests.support.compiled import compiled_or_pure
from tests.support.synth import dump, entry


def _rule(f: EdgeFacts) -> EdgeHeader:
    n = len(f.created)
    sampled = list(range(n)) if n <= 2 * SAMPLE else [*range(SAMPLE), *range(n - SAMPLE, n)]
    created = [f.created[i] for i in sampled]
    present = [c for c in created if c]
    newest = max([0] + created + [f.started[i] for i in sampled] + [f.completed[i] for i in sampled]) or None
    timeouts = {}
    for i in sampled:
        if f.timeout[i]:
            timeouts[f.pg_name[i]] = f.timeout[i]
    return EdgeHeader(min(present, default=None), max(present, default=None), newest, timeouts,
                      frozenset(f.events[i] for i in sampled) - {None})


def _listed(f: EdgeFacts) -> EdgeFacts:
    """The same facts with every column a list (the compiled ones hold the numbers in arrays)."""
    return EdgeFacts(*map(list, f._columns()))


def _facts(rng: random.Random) -> EdgeFacts:
    n = rng.choice([0, 1, 5, 2 * SAMPLE, 2 * SAMPLE + 1, rng.randint(0, 4 * SAMPLE)])
    odd = rng.random() < 0.1
    def time() -> object:
        v = rng.choice([0, 0, rng.randint(1, 2 ** 62), -rng.randint(1, 10 ** 9), 2 ** 63 - 1, -2 ** 63])
        return rng.choice([v, True, 2 ** 64, 10 ** 30]) if odd and rng.random() < 0.05 else v
    names = ["0", "1", "dp_3", "".join(["dp", "_", "3"])] + ([7] if odd else [])  # (one name, two objects)
    if rng.random() < 0.2:  # more groups than the compiled loop keeps apart before it spills into the dict
        names += [f"pp_{i}" for i in range(rng.randint(10, 30))]
    f = EdgeFacts([rng.choice(names) for _ in range(n)], [time() for _ in range(n)],
                  [time() for _ in range(n)], [time() for _ in range(n)],
                  [rng.choice([0, 0, 600_000, rng.randint(1, 10 ** 6)]) for _ in range(n)],
                  [rng.choice([None, "nccl", "", "gloo"]) for _ in range(n)])
    if not odd and rng.random() < 0.5:  # the numbers as EdgeFacts.of makes them where they fit 64 bits
        f.created, f.started, f.completed, f.timeout = (array("q", c) for c in f._columns()[1:5])
    return f


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "pure"])
def test_the_header_is_what_the_sampled_entries_say(compiled):
    rng = random.Random(17)
    with compiled_or_pure(rank_trace, "_rows", compiled):
        for _ in range(3000):
            f = _facts(rng)
            got = f.header()
            assert got == _rule(f), f
            assert list(got.timeouts_ms) == list(_rule(f).timeouts_ms)  # (in the order the groups first show)
            assert got.last_event_ns is None or got.last_event_ns > 0


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "pure"])
def test_each_entrys_facts_are_its_times_its_timeout_and_its_backend_where_it_shows_events(compiled):
    base = normalize(dump([entry(0, 1)], world=1), "x", "pickle", rank=0).entries[0]
    rng = random.Random(23)
    with compiled_or_pure(rank_trace, "_rows", compiled):
        for _ in range(500):
            odd = rng.random() < 0.1
            def value(odd: bool = odd) -> object:
                return rng.choice([None, 0, rng.randint(1, 2 ** 63 - 1), -5] + [True, "7", "", 2 ** 70] * odd)
            entries = [base._replace(pg_name=rng.choice(["0", "1"]), time_created_ns=value(), time_started_ns=value(),
                                     time_completed_ns=value(), timeout_ms=value(), backend=rng.choice(["nccl", ""]),
                                     state=rng.choice(["scheduled", "".join(["sched", "uled"]), "started",
                                                       "completed"] + [None] * odd))
                       for _ in range(rng.randint(0, 6))]
            got = EdgeFacts.of(entries if rng.random() < 0.5 else tuple(entries))
            assert _listed(got) == EdgeFacts([e.pg_name for e in entries], [e.time_created_ns or 0 for e in entries],
                                    [e.time_started_ns or 0 for e in entries],
                                    [e.time_completed_ns or 0 for e in entries], [e.timeout_ms or 0 for e in entries],
                                    [None if e.state == "scheduled" else e.backend for e in entries]), entries
