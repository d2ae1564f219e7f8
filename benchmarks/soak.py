"""Soak: `frexport serve` under continuous polling and dump rewrites; is memory flat?

    python benchmarks/soak.py --ranks 8 --minutes 30
    python benchmarks/soak.py --ranks 64 --minutes 30 --poll 5

Busy replay worker servers (one per rank) advance their 2000-entry ring buffers all the time;
a writer rewrites PyTorch-style dump files for a quarter of the ranks every second (rank files
overwritten in place, like dumps on timeout, and a corrupt one now and then); OTLP export points at
a closed port (the collector is down the whole time). Every few seconds the sidecar's RSS and
open file descriptors are sampled. After a warm-up third, the least-squares slope of each is
printed (MB per minute, fds per minute) with the error counts from its own metrics.

    python benchmarks/soak.py --ranks 8 --minutes 10 --hostile

`--hostile` adds what issue 18 found: JSON dumps rewritten every second with fresh op and group
names, a 1 MiB group description and values outside 64 bits (a 400-digit sequence number, an
infinite duration, lone surrogates), and slow peers in the sockets directory (they trickle a byte
at a time, or answer `100 Continue` forever). It also times a scrape and counts its series at every
sample: both must stay flat (the bounds of docs/metrics.md), as RSS must.
"""

from __future__ import annotations

import argparse
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from multiprocessing import Process
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

from bench_sidecar import _serve_replays, rss_mb  # noqa: E402

from tests.support.ports import free_port  # noqa: E402


def _slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope, per minute."""
    n = len(points)
    if n < 2:
        return 0.0
    mx = sum(t for t, _ in points) / n
    my = sum(v for _, v in points) / n
    den = sum((t - mx) ** 2 for t, _ in points)
    return 0.0 if den == 0 else sum((t - mx) * (v - my) for t, v in points) / den * 60


def _rewrite_dumps(directory: Path, ranks: list[int], stop: threading.Event) -> None:
    from tests.support.synth import dump, entry

    n = 0
    while not stop.is_set():
        for r in ranks:
            n += 1
            base = n * 200  # the rank moves on: later records, later times
            es = [entry(base + i, base + i + 1, created=time.time_ns() - (200 - i) * 10**7) for i in range(200)]
            data = pickle.dumps(dump(es, world=len(ranks)), protocol=2)
            if n % 20 == 0:
                data = data[: len(data) // 3]  # now and then a dump cut short
            (directory / f"trace_{r}").write_bytes(data)
        stop.wait(1.0)


def _hostile_dumps(directory: Path, ranks: list[int], stop: threading.Event) -> None:
    """Rewrites with fresh names each time, a huge description, numbers no recorder writes."""
    import json

    from tests.support.synth import dump, entry

    huge = "h" * (1 << 20)
    n = 0
    while not stop.is_set():
        n += 1
        for r in ranks:
            base = n * 300
            es = [entry(base + i, base + i + 1, op=f"op_{n}_{i}\ud800", pg=(f"g{n}_{i % 50}", f"desc{n}_{i % 50}"),
                        created=time.time_ns() - (300 - i) * 10**7) for i in range(300)]
            es[0]["process_group"] = ["0", huge]
            es[1]["duration_ms"] = "INFINITY"
            text = json.dumps(dump(es, world=len(ranks))).replace('"INFINITY"', "Infinity")
            text = text.replace(f'"collective_seq_id": {base + 3},', '"collective_seq_id": ' + "9" * 400 + ",", 1)
            (directory / f"trace_{r}.json").write_text(text)
        stop.wait(1.0)


def _slow_peer(path: str, stop: threading.Event, kind: str) -> None:
    """A peer a real worker server never is: it trickles its head, or says 100 Continue forever."""
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(8)
    srv.settimeout(0.5)

    def one(conn: socket.socket) -> None:
        try:
            conn.recv(65536)
            while not stop.is_set():
                conn.sendall(b"H" if kind == "trickle" else b"HTTP/1.1 100 Continue\r\n\r\n")
                time.sleep(0.5 if kind == "trickle" else 0.001)
        except OSError:
            pass
        finally:
            conn.close()

    while not stop.is_set():
        try:
            conn, _ = srv.accept()
        except OSError:
            continue
        threading.Thread(target=one, args=(conn,), daemon=True).start()
    srv.close()


def _scrape(port: int) -> tuple[float, int, str]:
    start = time.perf_counter()
    body = _get(port, "/metrics")
    return time.perf_counter() - start, sum(1 for line in body.splitlines() if line and line[0] != "#"), body


def soak(ranks: int, seconds: float, poll: float, sample_every: float = 3.0, rate: float = 20.0,
         progress: bool = False, hostile: bool = False) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="frx-soak-"))
    sockets, dumps = tmp / "sockets", tmp / "dumps"
    sockets.mkdir()
    dumps.mkdir()
    replay = Process(target=_serve_replays, args=(str(sockets), ranks, rate), daemon=True)
    replay.start()
    while len(list(sockets.glob("*.sock"))) < ranks:
        time.sleep(0.1)
    stop = threading.Event()
    # dump files for other ranks than the sockets: one rank's dumps and socket are one process
    writer = threading.Thread(target=_rewrite_dumps, args=(dumps, list(range(ranks, ranks + max(1, ranks // 4))),
                                                           stop), daemon=True)
    writer.start()
    if hostile:
        bad = list(range(ranks + max(1, ranks // 4), ranks + max(1, ranks // 4) + max(1, ranks // 4)))
        threading.Thread(target=_hostile_dumps, args=(dumps, bad, stop), daemon=True).start()
        for i, kind in enumerate(("trickle", "continue")):
            threading.Thread(target=_slow_peer, args=(str(sockets / f"rank-{2000 + i}.sock"), stop, kind),
                             daemon=True).start()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead_collector = s.getsockname()[1]
    port = free_port()
    env = dict(os.environ, FREXPORT_ANALYSIS__INTERVAL=f"{poll}s", FREXPORT_TRACES__ENABLED="true",
               OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{dead_collector}",
               OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf", OTEL_EXPORTER_OTLP_TIMEOUT="1")
    proc = subprocess.Popen([sys.executable, "-m", "frexport", "serve", "--sockets-dir", str(sockets),
                             "--dump-dir", str(dumps), "--listen", f"127.0.0.1:{port}",
                             "--poll-interval", f"{poll}s"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rss, fds, latency, series = [], [], [], []
    start = time.monotonic()
    try:
        while time.monotonic() - start < seconds:
            time.sleep(sample_every)
            if proc.poll() is not None:
                raise RuntimeError(f"frexport serve exited with {proc.returncode}")
            t = time.monotonic() - start
            rss.append((t, rss_mb(proc.pid)))
            fds.append((t, float(len(os.listdir(f"/proc/{proc.pid}/fd")))))
            if hostile:
                took, count, _ = _scrape(port)
                latency.append((t, took))
                series.append((t, float(count)))
            if progress and int(t // 60) != int((t - sample_every) // 60):  # a cut-off run still leaves figures
                print(f"  {t / 60:5.1f} min: RSS {rss[-1][1]:.0f} MB, {fds[-1][1]:.0f} fds", flush=True)
        from prometheus_client.parser import text_string_to_metric_families

        body = _get(port, "/metrics")
        metrics = [s for fam in text_string_to_metric_families(body) for s in fam.samples]
    finally:
        stop.set()
        proc.terminate()
        proc.wait(10)
        replay.terminate()
        shutil.rmtree(tmp, ignore_errors=True)
    warm = [p for p in rss if p[0] >= seconds / 3]
    warm_fds = [p for p in fds if p[0] >= seconds / 3]
    errors = {s.labels.get("reason", s.name): s.value for s in metrics
              if s.name in ("frexport_source_errors_total", "frexport_decode_errors_total")}
    spans = {s.labels["result"]: s.value for s in metrics if s.name == "frexport_otlp_spans_total"}
    return {"ranks": ranks, "seconds": seconds, "rss_start_mb": warm[0][1] if warm else 0,
            "rss_end_mb": rss[-1][1] if rss else 0, "rss_peak_mb": max(v for _, v in rss) if rss else 0,
            "rss_slope_mb_per_min": _slope(warm), "fd_slope_per_min": _slope(warm_fds),
            "rss_mb": [round(v) for _, v in rss],
            "fds_end": fds[-1][1] if fds else 0, "errors": errors, "spans": spans,
            # open fds swing with the polls in flight (one socket per rank): compare peaks, not a slope
            "fds_peak_first_half": max((v for t, v in fds if t < seconds / 2), default=0),
            "fds_peak_second_half": max((v for t, v in fds if t >= seconds / 2), default=0),
            **(_flatness(latency, series, seconds, metrics, len(body)) if hostile else {})}


def _flatness(latency: list, series: list, seconds: float, metrics: list, last_bytes: int) -> dict:
    """Scrape latency and series count: the first half against the second (flat means bounded)."""
    def halves(points: list) -> tuple[float, float]:
        first = [v for t, v in points if t < seconds / 2] or [0.0]
        second = [v for t, v in points if t >= seconds / 2] or [0.0]
        return max(first), max(second)

    return {"scrape_s_max_halves": halves(latency), "series_max_halves": halves(series),
            "series_slope_per_min": _slope([p for p in series if p[0] >= seconds / 3]),
            "scrape_bytes_end": last_bytes,
            "series_dropped": {s.labels["family"]: s.value for s in metrics
                               if s.name == "frexport_metrics_series_dropped_total"}}


def _get(port: int, path: str) -> str:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        return r.read().decode()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--poll", type=float, default=1.0, help="poll and analysis interval, seconds")
    ap.add_argument("--hostile", action="store_true", help="add the hostile mix of issue 18 (module docstring)")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a killed soak still stops its sidecar
    r = soak(args.ranks, args.minutes * 60, args.poll, progress=True, hostile=args.hostile)
    print(f"soak: {r['ranks']} ranks for {r['seconds'] / 60:.1f} min: RSS {r['rss_start_mb']:.0f} -> "
          f"{r['rss_end_mb']:.0f} MB (peak {r['rss_peak_mb']:.0f}), slope after warm-up "
          f"{r['rss_slope_mb_per_min']:+.2f} MB/min; open fds {r['fds_end']:.0f}, slope "
          f"{r['fd_slope_per_min']:+.2f}/min; errors {r['errors']}; spans {r['spans']}")
    if args.hostile:
        print(f"hostile: series max {r['series_max_halves'][0]:.0f} (first half) / {r['series_max_halves'][1]:.0f} "
              f"(second), slope {r['series_slope_per_min']:+.1f}/min; scrape max "
              f"{r['scrape_s_max_halves'][0] * 1000:.0f} / {r['scrape_s_max_halves'][1] * 1000:.0f} ms; "
              f"last scrape {r['scrape_bytes_end'] / 1024:.0f} KiB; "
              f"dropped {r['series_dropped']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
