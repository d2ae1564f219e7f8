"""The ranks' last lines, read from files others write (decode/rank_logs.py): bounded, no link followed."""

import os

from frexport.decode import rank_logs
from frexport.decode.rank_logs import TAIL_BYTES, TAIL_LINES, read_log_dirs, ring_tail


def test_the_tail_spans_the_rotated_file_and_starts_at_a_line(tmp_path):
    (tmp_path / "rank-2.log.1").write_bytes(b"".join(b"old %05d\n" % i for i in range(20000)))
    (tmp_path / "rank-2.log").write_bytes(b"new 1\nnew 2\n")
    text = ring_tail(str(tmp_path), 2)
    lines = text.splitlines()
    assert lines[-2:] == ["new 1", "new 2"] and lines[-3] == "old 19999" and len(lines) == TAIL_LINES
    assert all(line.startswith(("old ", "new ")) and len(line) in (5, 9) for line in lines)  # no cut line


def test_a_huge_file_costs_its_tail_only_and_bad_bytes_are_replaced(tmp_path):
    with open(tmp_path / "rank-0.log", "wb") as f:
        f.truncate(50 << 30)  # 50 GiB, sparse: only the tail is read
        f.seek(0, os.SEEK_END)
        f.write(b"\nlast \xff\xfe words\n")
    text = ring_tail(str(tmp_path), 0)
    assert text.splitlines()[-1] == "last \ufffd\ufffd words" and len(text.encode()) <= TAIL_BYTES * 2


def test_links_and_other_kinds_are_refused(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("the sidecar's key\n")
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "rank-1.log").symlink_to(secret)
    os.mkfifo(logs / "rank-2.log")  # would block a plain open
    assert ring_tail(str(logs), 1) is None and ring_tail(str(logs), 2) is None and ring_tail(str(logs), 3) is None
    (tmp_path / "linked").symlink_to(logs, target_is_directory=True)
    (logs / "rank-4.log").write_text("ok\n")
    assert ring_tail(str(tmp_path / "linked"), 4) is None and ring_tail(str(logs), 4) == "ok\n"


def test_a_bundles_logs_are_read_by_rank(tmp_path, monkeypatch):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "rank_3.log").write_text("RuntimeError: x\n")
    (tmp_path / "logs" / "rank_x.log").write_text("not a rank\n")
    (tmp_path / "logs" / "rank_5.log").symlink_to(tmp_path / "logs" / "rank_3.log")
    found = read_log_dirs([str(tmp_path) + "/", str(tmp_path / "missing")])
    assert found.tails == {3: "RuntimeError: x\n"}
    assert found.read == {str(tmp_path / "logs" / "rank_3.log")}
    monkeypatch.setattr(rank_logs, "MAX_RANKS", 0)
    assert read_log_dirs([str(tmp_path)]).tails == {}
