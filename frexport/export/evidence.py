"""Evidence bundles: what an on-call engineer needs, saved the moment a stall is seen.

A bundle is a directory `<evidence dir>/<UTC time>-<reason>/` with every rank's Flight Recorder
snapshot as `trace_<rank>` (PyTorch's pickle format: the raw bytes of the agent's pickle handler
when it answered, with stack frames, else re-encoded from the last snapshot), the stuck ranks'
Python stacks (`stacks/rank_<r>.traceback.txt`, `stacks/rank_<r>.pyspy_dump.txt`; only handlers the
worker server lists are asked for), the last lines those ranks printed (`logs/rank_<r>.log`, from the
agent's ring files beside the sockets), the analysis (`report.txt`, `report.json`: made by the evidence
stage, frexport/evidence/, from the bundle's own files, so call sites come from the pickles' frames
and each culprit's place now from its stack) and `manifest.json`. This writer only writes what the
stage hands it: `begin` the data, `finish` the report and the manifest. A bundle is written to a
hidden temp directory and renamed, so a half-written bundle is never seen; its name is
unpredictable (mkdtemp) and files are created exclusively, so nothing planted in the evidence
directory redirects a write. A bundle holds each rank's raw data only while it stays within
`max_bytes` (the manifest lists the ranks left out). Retention keeps at most `max_bundles` bundles
and `max_bytes` bytes, oldest removed first, counting only bundles this sidecar signed (the
manifest's HMAC and file hashes, export/bundle_files.py), never the one just written.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import sys
import tempfile
import time

from frexport import logs
from frexport.evidence.bundle import Bundle, Draft
from frexport.export.bundle_files import NotOurs, bundle_key, digest, open_bundle, sign, tree_size
from frexport.export.encode import to_pickle
from frexport.model.dump import RankDump

_REPORT_RESERVE = 16 << 10  # room kept at least for the bundle's own report
PARTIAL_MAX_AGE_S = 3600.0  # a half-written bundle (.bundle-*) older than this was abandoned
_MAX_NAME_TRIES = 1000  # bundles of one second and one reason


class EvidenceWriter:
    """Writes the bundles the evidence stage hands it (frexport/evidence/bundle.py's BundleWriter)."""

    def __init__(self, directory: str, max_bundles: int = 20, max_bytes: int = 1 << 30) -> None:
        self.directory = directory
        self.max_bundles = max_bundles
        self.max_bytes = max_bytes
        self.written = 0
        self.failed = 0
        self._left_alone: tuple[int, str] = (0, "")  # what retention last said it left alone: (count, first)

    def write(self, bundle: Bundle) -> str | None:
        draft = self.begin(bundle)
        return self.finish(draft, bundle.report_text, bundle.report_json) if draft is not None else None

    def begin(self, bundle: Bundle) -> Draft | None:
        """The bundle's data, in a hidden directory of its own; its report and manifest come in `finish`."""
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        name = f"{stamp}-{_slug(bundle.reason)}"
        tmp = ""
        try:
            os.makedirs(self.directory, exist_ok=True)
            # an unpredictable name made fresh (mkdtemp: O_EXCL, mode 0700): nothing planted in the
            # directory (a symlink under a guessable temp name) can redirect what is written
            self._sweep_partials()
            tmp = tempfile.mkdtemp(prefix=".bundle-", dir=self.directory)
            os.chmod(tmp, 0o755)  # readable like bundles always were; created 0700 until it is ours
            os.mkdir(os.path.join(tmp, "stacks"))
            return self._data(tmp, bundle, stamp, name)
        except OSError as exc:
            self._failed(tmp, name, exc)
            return None

    def finish(self, draft: Draft, text: str, report: dict) -> str | None:
        """The report (the live one if the given one is over its room), the signed manifest, and the
        rename that makes the bundle seen whole; then retention."""
        final = ""
        try:
            for n in range(1, _MAX_NAME_TRIES + 1):
                name = draft.name if n == 1 else f"{draft.name}-{n}"
                if os.path.lexists(os.path.join(self.directory, name)):
                    continue
                # the signature covers the name: a bundle renamed or swapped in under another is not ours
                manifest = self._report_and_manifest(draft, text, report, name)
                final = os.path.join(self.directory, name)
                try:
                    os.rename(draft.path, final)
                    break
                except OSError as exc:  # taken since the look (another writer): the next name
                    if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                        raise
            else:
                raise OSError(errno.EEXIST, f"no free name for {draft.name}")
        except OSError as exc:
            self._failed(draft.path, final or draft.name, exc)
            return None
        self.written += 1
        removed = self._retain(os.path.basename(final))
        omitted = manifest["omitted_over_max_bytes"]
        logs.get().warning("evidence bundle written: %s%s%s", final,
                           f" (raw data of ranks {_ranks_text(omitted)} left out: over evidence.max_bytes)"
                           if omitted else "",
                           f"; retention removed {len(removed)} older bundles" if removed else "",
                           extra={"path": final})
        return final

    def _failed(self, tmp: str, name: str, exc: OSError) -> None:
        self.failed += 1
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
        logs.get().error("could not write evidence bundle %s: %s", name, exc, extra={"error": str(exc)})

    def _data(self, tmp: str, bundle: Bundle, stamp: str, name: str) -> Draft:
        """Write the bundle's data files; each rank's raw data only while the bundle stays within max_bytes."""
        live_size = len(bundle.report_text) + len(json.dumps(bundle.report_json))
        # the bundle's own report is written after the data; the live one is its size's measure
        draft = Draft(bundle, tmp, stamp, name, reserve=max(2 * live_size, _REPORT_RESERVE))
        budget = self.max_bytes - draft.reserve - 64 * 1024  # and the manifest
        used = 0

        def add(rel: str, data: bytes) -> None:  # a small file, within the budget (else left out)
            nonlocal used
            if used + len(data) > budget:
                return
            os.makedirs(os.path.dirname(os.path.join(tmp, rel)), exist_ok=True)
            used += _write(os.path.join(tmp, rel), data)
            draft.files.append(rel)
            draft.hashes[rel] = digest(data)

        for rank, kinds in sorted(bundle.stacks.items()):  # stacks first: small, and what matters most
            for kind, text in sorted(kinds.items()):
                add(f"stacks/rank_{rank}.{kind}.txt", text.encode(errors="replace"))
        for rank, text in sorted(bundle.logs.items()):  # as small, and why a rank that left went
            add(f"logs/rank_{rank}.log", text.encode(errors="replace"))  # read back by decode/rank_logs.py
        for rel, data in sorted(bundle.profiles.items()):  # profiler traces (evidence/profiles.py)
            if rel.startswith("profiles/") and "/" not in rel[len("profiles/"):]:
                add(rel, data)
        for rank, dump in sorted(bundle.dumps.items()):
            data = bundle.raw_pickles.get(rank) or to_pickle(dump)
            if used + len(data) > budget:
                draft.omitted.append(rank)
                continue
            used += _write(os.path.join(tmp, f"trace_{rank}"), data)
            draft.files.append(f"trace_{rank}")
            draft.hashes[f"trace_{rank}"] = digest(data)
        return draft

    def _report_and_manifest(self, draft: Draft, text: str, report: dict, name: str) -> dict:
        bundle, tmp, hashes = draft.bundle, draft.path, dict(draft.hashes)
        health = _c10d_health(bundle.dumps)
        if health:  # torch 2.15's health check: the backends that aborted, said before the analysis
            text = "".join(f"c10d health check: backend {b} aborted on ranks {_ranks(rs)}\n"
                           for b, rs in sorted(health.items())) + text
        text_b, json_b = text.encode(errors="replace"), json.dumps(report, indent=2).encode()
        if len(text_b) + len(json_b) > draft.reserve:  # max_bytes holds: the live report fits by construction
            text_b = bundle.report_text.encode(errors="replace")
            json_b = json.dumps(bundle.report_json, indent=2).encode()
        _write(os.path.join(tmp, "report.txt"), text_b)
        _write(os.path.join(tmp, "report.json"), json_b)
        hashes.update({"report.txt": digest(text_b), "report.json": digest(json_b)})
        omitted = draft.omitted
        manifest = {BUNDLE_MARKER: 1, "name": name, "reason": bundle.reason, "created": draft.stamp,
                    "written_ns": time.time_ns(),
                    "ranks": sorted(bundle.dumps),
                    "with_frames": sorted(r for r in bundle.raw_pickles if r not in omitted),
                    "omitted_over_max_bytes": omitted, "files": draft.files + ["report.txt", "report.json"],
                    "recorders": {str(r): list(d.recorders) for r, d in sorted(bundle.dumps.items()) if d.recorders},
                    "c10d_unhealthy_backends": {b: rs for b, rs in sorted(health.items())},
                    "sha256": hashes}
        # signed: the marker alone is public, and a planted copy of it fooled retention (bundle_files.py)
        manifest = sign(manifest, bundle_key(self.directory))
        _write(os.path.join(tmp, "manifest.json"), json.dumps(manifest, indent=2).encode())
        return manifest

    def _sweep_partials(self) -> None:
        """Remove bundles left half-written by a writer that was killed (a sidecar stopped mid-bundle):
        retention counts only finished bundles, so they would fill the volume over restarts. Only old
        ones: a bundle is written within its fetch deadline, seconds, never PARTIAL_MAX_AGE_S."""
        cutoff = time.time() - PARTIAL_MAX_AGE_S
        try:
            names = [n for n in os.listdir(self.directory) if n.startswith(".bundle-")]
        except OSError:
            return
        for n in names:
            path = os.path.join(self.directory, n)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode) and st.st_mtime < cutoff and not self._signed(n):
                shutil.rmtree(path, ignore_errors=True)  # rmtree never follows a link (avoids_symlink_attacks)

    def _say_left_alone(self, left: list[tuple[str, str]]) -> None:
        """One line for what retention leaves alone (directories it did not sign: planted, renamed,
        an earlier run's under another key), and only when that changed: a volume of 5,000 planted
        directories cost 5,000 lines a bundle."""
        seen = (len(left), left[0][0] if left else "")
        if left and seen != self._left_alone:
            n, why = left[0]
            logs.get().info("evidence retention leaves %d director%s alone, not bundles this sidecar signed under "
                            "their names (e.g. %s: %s)", len(left), "y" if len(left) == 1 else "ies", n, why)
        self._left_alone = seen

    def _signed(self, name: str) -> bool:
        """A directory holding a manifest this sidecar signed, whatever it is called now: a bundle
        renamed to look half-written is not swept away (its name no longer verifies; it is left alone)."""
        try:
            dfd = os.open(self.directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        except OSError:
            return True  # cannot tell: keep it
        try:
            bfd, _, _ = open_bundle(dfd, name, bundle_key(self.directory), check_name=False)
            os.close(bfd)
            return True
        except (NotOurs, OSError):
            return False
        finally:
            os.close(dfd)

    def _retain(self, just_written: str) -> list[str]:
        """Oldest first, only bundles this sidecar signed (bundle_files.py: a planted copy of the public
        marker is not one), never the one just written. Returns what was removed. Everything is
        opened relative to the directory with O_NOFOLLOW; what is not ours is left alone, and said once."""
        try:
            key = bundle_key(self.directory)
            dfd = os.open(self.directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        except OSError:
            return []
        try:
            sizes: dict[str, int] = {}
            written: dict[str, int] = {}  # the signed time each was written: oldest first (names are reused
            left: list[tuple[str, str]] = []  # within a second once retention frees them)
            for n in sorted(os.listdir(dfd)):
                if n.startswith(".") or n == just_written:
                    continue
                try:
                    bfd, manifest, _ = open_bundle(dfd, n, key)
                except (NotOurs, OSError) as exc:
                    left.append((n, str(exc)))
                    continue
                at = manifest.get("written_ns")
                written[n] = at if isinstance(at, int) else 0
                try:
                    sizes[n] = tree_size(bfd)
                finally:
                    os.close(bfd)
            self._say_left_alone(left)
            names = sorted(sizes, key=lambda n: (written[n], n))
            total = sum(sizes.values()) + _tree_size(os.path.join(self.directory, just_written))
            removed = []
            while names and (len(names) + 1 > self.max_bundles or total > self.max_bytes):
                n = names.pop(0)
                if sys.version_info >= (3, 11):
                    shutil.rmtree(n, dir_fd=dfd, ignore_errors=True)
                else:  # (found by mypy) 3.10's rmtree has no dir_fd: its TypeError ended every write's retention
                    shutil.rmtree(os.path.join(self.directory, n), ignore_errors=True)
                total -= sizes[n]
                removed.append(n)
            return removed
        except OSError:
            return []
        finally:
            os.close(dfd)


BUNDLE_MARKER = "frexport_evidence_bundle"


def _ranks_text(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks[:20])) + (f" and {len(ranks) - 20} more" if len(ranks) > 20 else "")


def _write(path: str, data: bytes) -> int:
    # O_EXCL|O_NOFOLLOW: a file that is already there (planted) is an error, never written through
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return len(data)


def _tree_size(path: str) -> int:
    total = 0
    for dirpath, _, filenames in os.walk(path):
        for n in filenames:
            try:
                total += os.lstat(os.path.join(dirpath, n)).st_size
            except OSError:
                pass
    return total


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in text)[:60].strip("-") or "bundle"


def _c10d_health(dumps: dict[int, RankDump]) -> dict[str, list[int]]:
    """backend -> the ranks whose c10d health check says it aborted (torch >= 2.15)."""
    out: dict[str, list[int]] = {}
    for rank, d in sorted(dumps.items()):
        for backend in d.unhealthy_backends or ():
            out.setdefault(backend, []).append(rank)
    return out


def _ranks(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks))
