"""No value from a dump, a peer or a file name can kill or bloat a scrape (issue 18, points 1 and 7).

Each test feeds the state what a writer of a dump directory or a socket directory can put there,
renders the whole registry as `frexport serve` does, and checks the exposition with promtool (the
Prometheus parser) where it is installed, else with client_python's parser.
"""

from __future__ import annotations

import json
import shutil
import subprocess

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from frexport.config import Analysis
from frexport.decode.read import decode_bytes
from frexport.export.prometheus import Bounds, sidecar_registry
from frexport.export.prometheus.bounds import DEFAULT_BOUNDS
from frexport.live.diagnosis import LiveAnalysis
from frexport.live.state import LiveState
from frexport.sources.health import HealthRegistry
from tests.support.synth import T0, dump, entry

S = 10**9


def _snapshot(entries: list[dict], rank: int = 0, at: int = T0):
    """Through JSON text, as a dump file or a worker-server body arrives (lone surrogates survive it)."""
    return decode_bytes(json.dumps(dump(entries, world=2)).encode(), f"socket:rank-{rank}", rank=rank,
                        dumped_at_ns=at)


def _scrape(state: LiveState, health: HealthRegistry | None = None, bounds: Bounds = DEFAULT_BOUNDS) -> bytes:
    registry = sidecar_registry(state, health or HealthRegistry(), LiveAnalysis(Analysis()), process=False,
                                bounds=bounds)
    return generate_latest(registry)


def assert_valid_exposition(body: bytes) -> dict[str, list]:
    """promtool accepts it (and client_python parses it); returns the samples by family."""
    promtool = shutil.which("promtool")
    if promtool:
        check = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True, timeout=60)
        # promtool lints too (counter names, units); only a parse error fails the check here
        assert b"error while linting" not in check.stderr and b"parse" not in check.stderr.lower(), check.stderr
    families = {f.name: f.samples for f in text_string_to_metric_families(body.decode("utf-8"))}
    series = [(s.name, tuple(sorted(s.labels.items()))) for samples in families.values() for s in samples]
    assert len(series) == len(set(series)), "a series twice: Prometheus would reject the scrape"
    return families


def test_lone_surrogates_in_names_and_a_non_utf8_file_name_do_not_kill_the_scrape():
    state, health = LiveState(), HealthRegistry()
    bad = [entry(i, i + 1, op="all_reduce\ud800", pg=("0\udfff", "desc\ud800x")) for i in range(3)]
    state.ingest(_snapshot(bad), "socket:rank-0", T0)
    health.record("socket:rank-\udcff\udcfe", True, 0.1, T0)  # os.listdir's surrogateescape of a non-UTF-8 name
    families = assert_valid_exposition(_scrape(state, health))
    descs = {s.labels["pg_desc"] for s in families["frexport_collectives"]}
    assert descs == {"desc\\ud800x"}, descs  # shown escaped, not dropped
    assert {s.labels["source"] for s in families["frexport_source_up"]} == {"socket:rank-\\udcff\\udcfe"}
    assert families["frexport_pg_last_enqueued_collective"][0].value == 3


def test_an_8_mib_group_description_makes_a_small_scrape():
    state = LiveState()
    huge = "d" * (8 << 20)
    state.ingest(_snapshot([entry(i, i + 1, pg=("0", huge), state="completed") for i in range(2)]),
                 "socket:rank-0", T0)
    body = _scrape(state)
    assert len(body) < 200_000, len(body)  # was 285 MB for a real 8 MiB desc
    families = assert_valid_exposition(body)
    desc = families["frexport_pg_last_enqueued_collective"][0].labels["pg_desc"]
    assert len(desc) == 256 and desc.startswith("ddd") and "...~" in desc


def test_cut_values_stay_distinct():
    state = LiveState()
    long = "x" * 1000
    es = [entry(i, i + 1, pg=(str(i), long + str(i)), pg_id=i) for i in range(5)]
    state.ingest(_snapshot(es), "socket:rank-0", T0)
    families = assert_valid_exposition(_scrape(state))
    assert len({s.labels["pg_desc"] for s in families["frexport_pg_last_enqueued_collective"]}) == 5


def test_an_int_too_big_for_a_float_is_clamped_not_fatal():
    state = LiveState()
    state.ingest(_snapshot([entry(1, 1, state="scheduled")]), "socket:rank-0", T0)
    # decode drops such values (fields.py); a future path that lets one through must not cost the scrape
    g = state.ranks[0].groups["nccl:0"]  # synth's entries are NCCL-shaped
    g.last_enqueued, g.timeout_ms = 10**400, -(10**400)
    families = assert_valid_exposition(_scrape(state))
    assert families["frexport_pg_last_enqueued_collective"][0].value == 1.7976931348623157e308
    assert families["frexport_pg_timeout_seconds"][0].value == -1.7976931348623157e305
    assert {s.labels["collector"]: s.value for s in families["frexport_scrape_collector_success"]}["rank_progress"] == 1


def test_a_family_over_its_bound_keeps_its_first_series_and_says_what_it_dropped():
    state = LiveState()
    ops = [entry(i, i + 1, op=f"op{i:04d}", state="scheduled") for i in range(500)]
    state.ingest(_snapshot(ops), "socket:rank-0", T0)
    families = assert_valid_exposition(_scrape(state, bounds=Bounds(max_series_per_family=100)))
    pending = families["frexport_pending_collectives"]
    assert len(pending) == 100 and pending[0].labels["op"] == "op0000"
    dropped = {s.labels["family"]: s.value for s in families["frexport_metrics_series_dropped"]}
    assert dropped["frexport_pending_collectives"] == 400
    assert dropped["frexport_oldest_pending_collective_age_seconds"] == 400


def test_rewrites_with_fresh_op_names_do_not_grow_the_scrape_for_good():
    """Each rewrite of a dump with new op names used to add series forever (54,000 per 3 MB dump)."""
    state = LiveState(max_label_sets=300)
    sizes = []
    for n in range(6):
        at = T0 + n * 700 * S  # each rewrite more than rank_expiry after the last
        es = [entry(n * 100 + i, n * 100 + i + 1, op=f"gen{n}_op{i}") for i in range(100)]
        state.ingest(_snapshot(es, at=at), "socket:rank-0", at)
        state.expire(at, 600 * S)
        families = assert_valid_exposition(_scrape(state))
        sizes.append(len(families["frexport_collectives"]))
    assert sizes == [100] * 6, sizes  # the ops of the rewrites before expired with them
    assert len(state.collectives) == 100 and len(state.durations) == 100


def test_counts_of_ops_a_snapshot_still_holds_do_not_expire():
    state = LiveState()
    state.ingest(_snapshot([entry(1, 1, op="all_reduce")]), "socket:rank-0", T0)
    later = T0 + 900 * S
    state.ingest(_snapshot([entry(1, 1, op="all_reduce")], at=later), "socket:rank-0", later)  # same entry, held
    state.expire(later + S, 600 * S)
    assert state.collectives[("default_pg", "all_reduce", "completed")] == 1


def test_the_state_keeps_at_most_max_label_sets_pairs_and_counts_the_rest():
    state = LiveState(max_label_sets=10)
    for n in range(5):  # fast rewrites, all within the expiry: only the bound holds them
        at = T0 + n * S
        es = [entry(n * 1000 + i, n * 1000 + i + 1, op=f"r{n}_op{i}") for i in range(1000)]
        state.ingest(_snapshot(es, at=at), "socket:rank-0", at)
    assert len(state.durations) == 10 and len({k[:2] for k in state.collectives}) == 10
    families = assert_valid_exposition(_scrape(state))
    dropped = {s.labels["family"]: s.value for s in families["frexport_metrics_series_dropped"]}
    assert dropped["frexport_collectives_total"] == 4990


def test_process_groups_per_rank_are_bounded_too():
    state = LiveState(max_label_sets=20)
    es = [entry(i, 1, pg=(f"g{i}", f"desc{i}"), pg_id=i) for i in range(200)]
    state.ingest(_snapshot(es), "socket:rank-0", T0)
    assert len(state.ranks[0].groups) == 20
    assert state.refused()["frexport_pg_last_enqueued_collective"] == 180
