"""The log tee (frexport/agent/logtee.py, started by output.py): bounded ring files, the console
unchanged, and a trainer that is never blocked nor killed by it, whatever happens to its reader side
or to the tee itself. Real processes and pipes throughout."""

import os
import signal
import subprocess
import sys
import time

import pytest

from frexport.agent.logtee import Lines, Ring
from tests.support import paths

CAP = 4096


def test_writes_past_the_cap_keep_the_newest_bytes(tmp_path):
    ring = Ring(str(tmp_path), "rank-0.log", CAP)
    written = b""
    for i in range(700):
        chunk = b"line %04d\n" % i
        ring.write(chunk)
        written += chunk
    big = b"".join(b"big %06d\n" % i for i in range(3 * CAP // 11))  # one write over the cap: its newest lines
    ring.write(big)
    written += big
    ring.write(b"last words\n")
    written += b"last words\n"
    ring.close()
    current, older = (tmp_path / "rank-0.log").read_bytes(), (tmp_path / "rank-0.log.1").read_bytes()
    assert len(current) <= CAP and len(older) <= CAP and sorted(os.listdir(tmp_path)) == ["rank-0.log", "rank-0.log.1"]
    kept = older + current
    assert written.endswith(kept) and current.endswith(b"last words\n") and len(kept) >= CAP - 11
    assert older.startswith(b"big ")  # the big write's newest lines, from a line's start
    assert (tmp_path / "rank-0.log").stat().st_mode & 0o777 == 0o640


def test_a_link_planted_in_place_of_the_ring_is_not_written_through(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("keep me\n")
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "rank-1.log").symlink_to(target)
    with pytest.raises(OSError):
        Ring(str(logs), "rank-1.log", CAP)
    (tmp_path / "linkdir").symlink_to(logs, target_is_directory=True)
    with pytest.raises(OSError):
        Ring(str(tmp_path / "linkdir"), "rank-2.log", CAP)
    assert target.read_text() == "keep me\n"


def test_lines_are_prefixed_and_an_unfinished_one_waits_for_its_end():
    cut = Lines(b"[node7:3]", b"err")
    assert cut.feed(b"one\ntw", b"T1") == b"[node7:3] T1 err| one\n"
    assert cut.feed(b"o\nthree", b"T2") == b"[node7:3] T2 err| two\n"
    assert cut.flush(b"T3") == b"[node7:3] T3 err| three\n" and cut.flush(b"T4") == b""


# A trainer: the agent's capture, then what the test asks of it. Its stdout is the test's pipe.
TRAINER = """
import os, signal, sys, time
from frexport.agent.output import capture
tee = capture(sys.argv[1], 0, lambda m: sys.stderr.write("warn: " + m + "\\n"))
assert tee, "no tee"
what = sys.argv[2]
if what == "kill-tee":
    os.kill(tee, signal.SIGKILL)
if what == "term-tee":
    os.kill(tee, signal.SIGTERM)
    time.sleep(0.5)
start = time.monotonic()
for i in range(int(sys.argv[3])):
    print("x" * 1000, i, flush=True)
print("last words", flush=True)
sys.stderr.write("wrote in %.1f s\\n" % (time.monotonic() - start))
"""


def _trainer(tmp_path, what: str, lines: int, env=None) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(paths.ROOT), **(env or {}))
    return subprocess.Popen([sys.executable, "-c", TRAINER, str(tmp_path), what, str(lines)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)


def _ring_text(tmp_path):
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:  # the tee writes the ring a moment after the trainer exits
        text = (tmp_path / "logs" / "rank-0.log").read_text(errors="replace")
        if "last words" in text:
            return text
        time.sleep(0.1)
    return text


def test_the_console_gets_every_byte_unchanged_and_the_ring_the_prefixed_lines(tmp_path):
    p = _trainer(tmp_path, "", 3000)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert out == b"".join(b"%s %d\n" % (b"x" * 1000, i) for i in range(3000)) + b"last words\n"
    text = _ring_text(tmp_path)
    outs = [line for line in text.splitlines() if " out| " in line]
    assert outs[-1].endswith(" out| last words") and outs[-2].endswith(" out| %s 2999" % ("x" * 1000))
    assert all(line.startswith("[") for line in text.splitlines())
    assert len(text) <= 1 << 20  # the newest MiB: 3 MB were written


def test_a_console_whose_reader_went_away_neither_blocks_nor_kills_the_trainer(tmp_path):
    p = _trainer(tmp_path, "", 20000)  # 20 MB: far more than any pipe holds
    p.stdout.read(10000)
    p.stdout.close()  # the console's reader is gone: without the tee the trainer would die of EPIPE
    assert p.wait(60) == 0, p.stderr.read()
    assert "last words" in _ring_text(tmp_path)


def test_a_tee_that_dies_gives_the_console_back_without_a_failed_write(tmp_path):
    p = _trainer(tmp_path, "kill-tee", 5000)  # 5 MB after the tee is gone: more than its pipe holds
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert out.endswith(b"%s 4999\nlast words\n" % (b"x" * 1000)) and out.count(b"\n") == 5001
    assert b"the log tee exited" in err


def test_the_tee_outlives_sigterm_and_keeps_the_last_words(tmp_path):
    p = _trainer(tmp_path, "term-tee", 10)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0 and out.endswith(b"last words\n") and b"the log tee exited" not in err, err
    assert "last words" in _ring_text(tmp_path)


def test_turned_off_nothing_changes(tmp_path):
    p = _trainer(tmp_path, "", 1, env={"FREXPORT_AGENT_LOGS": "0"})
    _, err = p.communicate(timeout=60)
    assert p.returncode != 0 and b"no tee" in err and not (tmp_path / "logs").exists()


def test_signals_are_ignored_by_the_tee_itself(tmp_path):
    r, w = os.pipe()
    tee = subprocess.Popen([sys.executable, "-S", str(paths.ROOT / "frexport" / "agent" / "logtee.py"), "--dir",
                            str(tmp_path), "--rank", "5", "--stream", f"out:{r}"], pass_fds=[r],
                           stdout=subprocess.PIPE)
    os.close(r)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        time.sleep(0.2)
        tee.send_signal(sig)
    os.write(w, b"after the signals\n")
    os.close(w)  # EOF: the tee ends
    assert tee.stdout.read() == b"after the signals\n" and tee.wait(10) == 0
    assert (tmp_path / "rank-5.log").read_text().endswith(" out| after the signals\n")
