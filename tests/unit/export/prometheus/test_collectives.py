"""Finished collectives by outcome, and the duration histogram, per (pg_desc, op)."""

AR = {"pg_desc": "default_pg", "op": "all_reduce"}
AG = {"pg_desc": "tp", "op": "all_gather"}


def test_each_finished_collective_is_counted_once_by_outcome(scenario):
    r = scenario.registry()
    # 10 on ranks 0-2, and 8 on rank 3 (records 0-4 and 7-9; 5 and 6 were never seen)
    assert r.get_sample_value("frexport_collectives_total", {**AR, "state": "completed"}) == 38
    assert r.get_sample_value("frexport_collectives_total", {**AG, "state": "completed"}) == 1
    # rank 1's all_gather was retired by the NCCL watchdog without completing
    assert r.get_sample_value("frexport_collectives_total", {**AG, "state": "timed_out"}) == 1
    assert r.get_sample_value("frexport_collectives_total", {**AR, "state": "timed_out"}) is None


def test_durations_fall_in_cumulative_buckets(scenario):
    r = scenario.registry()
    bucket = "frexport_collective_duration_seconds_bucket"
    assert r.get_sample_value(bucket, {**AG, "le": "0.0025"}) == 0  # 5 ms
    assert r.get_sample_value(bucket, {**AG, "le": "0.005"}) == 1
    assert r.get_sample_value(bucket, {**AG, "le": "+Inf"}) == 1
    assert r.get_sample_value(bucket, {**AR, "le": "0.001"}) == 38  # 1 ms each
    assert r.get_sample_value("frexport_collective_duration_seconds_sum", AG) == 0.005
    assert r.get_sample_value("frexport_collective_duration_seconds_count", AR) == 38
    # two all_gathers finished, but the timed-out one has no duration: one observation
    assert r.get_sample_value("frexport_collective_duration_seconds_count", AG) == 1
