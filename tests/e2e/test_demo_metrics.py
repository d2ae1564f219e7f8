"""The demo's sidecar on the bundled dumps of a hung job (scripts/demo.sh's serve, without the
install): its series tell one story and its log is clean. The README's figures come from here."""

import time

import pytest

from tests.support.paths import REAL_FIXTURES
from tests.support.sidecar import Sidecar

DUMPS = REAL_FIXTURES / "stuck_before_collective"


def test_the_stalled_rank_appears_after_the_threshold_and_every_wait_uses_one_clock(tmp_path):
    log = tmp_path / "serve.log"
    side = Sidecar("--dump-dir", str(DUMPS), "--stall-after", "5s", log=log)  # returns once /healthz answers
    start = time.monotonic()
    try:
        statuses = {}
        while time.monotonic() - start < 30 and statuses.get(2) != "stalled":
            statuses = side.statuses()
            time.sleep(0.1)
        took = time.monotonic() - start
        assert statuses == {0: "blocked", 1: "blocked", 2: "stalled", 3: "blocked"}
        # the threshold is timed on the sidecar's clock from when it first saw the ranks
        assert 4.5 <= took < 15, took
        print(f"stalled rank on /metrics {took:.1f} s after the sidecar answered")
        stall = side.value("frexport_rank_stall_seconds", rank=2)
        ages = [s.value for s in side.samples() if s.name == "frexport_oldest_pending_collective_age_seconds"]
        # these dumps' file times are no clock: both are the recorder's own proof (0.22 ms), not days
        assert 0 < stall < 0.01 and len(ages) == 3 and max(ages) == pytest.approx(stall, abs=1e-6)
    finally:
        side.stop()
    lines = log.read_text().splitlines()
    assert [line for line in lines if " error " in line or " warning " in line or "skipped" in line] == []
