"""Evidence bundles: what an on-call engineer needs, saved the moment a stall is seen.

A bundle is a directory `<evidence dir>/<UTC time>-<reason>/` with every rank's
Flight Recorder snapshot as `trace_<rank>` (PyTorch's pickle format: the raw
bytes of the agent's pickle handler when it answered, with stack frames, else
re-encoded from the last snapshot), the stuck ranks' Python stacks
(`stacks/rank_<r>.traceback.txt`, `.pyspy.txt`), the analysis (`report.txt`,
`report.json`) and `manifest.json`. It is written to a hidden temp directory and
renamed, so a half-written bundle is never seen. Retention keeps at most
`max_bundles` bundles and `max_bytes` bytes, oldest removed first.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass

from frexport import logs
from frexport.export.encode import to_pickle
from frexport.model.dump import RankDump


@dataclass
class Bundle:
    reason: str
    report_text: str
    report_json: dict
    dumps: dict[int, RankDump]
    raw_pickles: dict[int, bytes]  # rank -> PyTorch's own pickle (with frames), when fetched
    stacks: dict[int, dict[str, str]]  # rank -> {"traceback": text, "pyspy": text}


class EvidenceWriter:
    def __init__(self, directory: str, max_bundles: int = 20, max_bytes: int = 1 << 30) -> None:
        self.directory = directory
        self.max_bundles = max_bundles
        self.max_bytes = max_bytes
        self.written = 0
        self.failed = 0

    def write(self, bundle: Bundle) -> str | None:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        name = f"{stamp}-{_slug(bundle.reason)}"
        final = os.path.join(self.directory, name)
        n = 1
        while os.path.exists(final):
            n += 1
            final = os.path.join(self.directory, f"{name}-{n}")
        tmp = os.path.join(self.directory, "." + os.path.basename(final) + ".tmp")
        try:
            os.makedirs(os.path.join(tmp, "stacks"), exist_ok=True)
            files = []
            for rank, dump in sorted(bundle.dumps.items()):
                data = bundle.raw_pickles.get(rank) or to_pickle(dump)
                _write(os.path.join(tmp, f"trace_{rank}"), data)
                files.append(f"trace_{rank}")
            for rank, kinds in sorted(bundle.stacks.items()):
                for kind, text in sorted(kinds.items()):
                    rel = f"stacks/rank_{rank}.{kind}.txt"
                    _write(os.path.join(tmp, rel), text.encode(errors="replace"))
                    files.append(rel)
            _write(os.path.join(tmp, "report.txt"), bundle.report_text.encode())
            _write(os.path.join(tmp, "report.json"), json.dumps(bundle.report_json, indent=2).encode())
            manifest = {"reason": bundle.reason, "created": stamp, "ranks": sorted(bundle.dumps),
                        "with_frames": sorted(bundle.raw_pickles), "files": files + ["report.txt", "report.json"]}
            _write(os.path.join(tmp, "manifest.json"), json.dumps(manifest, indent=2).encode())
            os.rename(tmp, final)
        except OSError as exc:
            self.failed += 1
            shutil.rmtree(tmp, ignore_errors=True)
            logs.get().error("could not write evidence bundle %s: %s", final, exc, extra={"error": str(exc)})
            return None
        self.written += 1
        self._retain()
        logs.get().warning("evidence bundle written: %s", final, extra={"path": final})
        return final

    def _retain(self) -> None:
        try:
            names = sorted(n for n in os.listdir(self.directory) if not n.startswith(".")
                           and os.path.isfile(os.path.join(self.directory, n, "manifest.json")))
        except OSError:
            return
        sizes = {n: _tree_size(os.path.join(self.directory, n)) for n in names}
        while names and (len(names) > self.max_bundles or sum(sizes[n] for n in names) > self.max_bytes):
            if len(names) == 1:
                break  # never delete the bundle just written
            shutil.rmtree(os.path.join(self.directory, names.pop(0)), ignore_errors=True)


def _write(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def _tree_size(path: str) -> int:
    total = 0
    for dirpath, _, filenames in os.walk(path):
        for n in filenames:
            try:
                total += os.path.getsize(os.path.join(dirpath, n))
            except OSError:
                pass
    return total


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in text)[:60].strip("-") or "bundle"
