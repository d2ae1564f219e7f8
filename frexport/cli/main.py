"""The `frexport` command line."""

from __future__ import annotations

import _thread
import argparse
import importlib
import os
import sys
import threading
from typing import Any

from frexport import __version__
from frexport.model.world import MAX_WORLD


def _rank_set(text: str) -> set[int]:
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        try:
            first, last = int(lo), int(hi or lo)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a rank list: {text!r} (use e.g. 0,2,4-7)") from None
        if not 0 <= first <= last < MAX_WORLD:  # checked before the set is built: 0-100000000000 was 13 GB
            raise argparse.ArgumentTypeError(f"not a rank range: {part!r} (ranks are 0 to {MAX_WORLD - 1}, "
                                             "the first of a range not above the last)")
        out.update(range(first, last + 1))
    return out


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError("must not be negative")
    return v


class _DeprecatedAlias(argparse.Action):
    """An old spelling of an option: still works, hidden from --help, says once on stderr what replaced it."""

    def __init__(self, option_strings: list[str], dest: str, replaced_by: str, **kwargs) -> None:
        super().__init__(option_strings, dest, help=argparse.SUPPRESS, **kwargs)
        self.replaced_by = replaced_by

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values,
                 option_string: str | None = None) -> None:
        print(f"{parser.prog}: {option_string} is deprecated, use {self.replaced_by}", file=sys.stderr)
        setattr(namespace, self.dest, values)


class _Version(argparse.Action):
    """`frexport X.Y.Z (compiled scanner: yes)`, or `no - <why>`: whether pickles take the fast path."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs) -> None:
        super().__init__(option_strings, dest, nargs=0, help="show the version and whether the compiled "
                         "scanner is in use, and exit", **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values,
                 option_string: str | None = None) -> None:
        from frexport.decode import scanned  # imported only when asked: the CLI starts without it

        print(version_line(scanned.status()))
        parser.exit()


def version_line(scanner: str) -> str:
    return f"frexport {__version__} (compiled scanner: {scanner})"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="frexport", description="PyTorch Flight Recorder exporter and analyzer")
    p.add_argument("--version", action=_Version)
    sub = p.add_subparsers(dest="command", required=True)

    a = sub.add_parser("analyze", help="diagnose a directory of Flight Recorder dumps (post-mortem)",
                       description="Diagnose Flight Recorder dumps across ranks: names the culprit rank, the "
                                   "collective and the call site. Stacks beside the dumps (stacks/rank_<r>.*.txt: "
                                   "faulthandler, py-spy) are evidence too; a directory from `frexport snapshot "
                                   "--rounds 2` is judged by what moved between its looks. Exit 0 healthy, 1 "
                                   "findings, 2 no readable input.")
    a.add_argument("paths", nargs="*", metavar="DIR",
                   help="dump directories, files, or path prefixes like /tmp/nccl_trace_rank_ "
                        "(default: PyTorch's dump locations)")
    a.add_argument("--prefix", help="file name prefix of the dumps (default: detected)")
    a.add_argument("--format", choices=("text", "json"), default="text")
    a.add_argument("--selected-ranks", type=_rank_set, metavar="RANKS",
                   help="only report findings involving these ranks, e.g. 0,4-7 (also filters --raw)")
    a.add_argument("--pg-filters", metavar="NAMES",
                   help="only report these process groups (names or descriptions, comma separated)")
    a.add_argument("--raw", action="store_true", help="print each rank's recorded entries instead of a diagnosis")
    a.add_argument("-v", "--verbose", action="store_true", help="list every note and skipped file; stacks in --raw")
    a.add_argument("--stall-after", type=_positive_float, default=5.0, metavar="SECONDS",
                   help="a rank seen this long after its peers issued a collective, without issuing it, "
                        "is missing from it (default 5; the same threshold as `serve --stall-after`)")
    a.add_argument("--stuck-after", dest="stall_after", type=_positive_float, action=_DeprecatedAlias,
                   replaced_by="--stall-after")
    a.add_argument("--straggler-ms", type=_positive_float, default=50.0, metavar="MS",
                   help="median lateness that makes a rank a straggler (default 50)")
    a.add_argument("--workers", type=int, default=None, help="decode processes (default: CPU count)")
    a.add_argument("--max-file-bytes", type=int, default=None, help="larger files are refused (default 512 MiB)")
    a.add_argument("--follow-symlinks", action="store_true", help="follow symbolic links inside directories")
    a.add_argument("--allow-no-memory-limit", action="store_true",
                   help="decode even where the decoders' memory limit (RLIMIT_AS) cannot be set")
    a.add_argument("--timeline", metavar="OUT.json",
                   help="also write a Chrome/Perfetto trace-event timeline (one track per rank and group)")

    s = sub.add_parser("serve", help="run the sidecar: watch dumps, poll worker servers, serve /metrics",
                       description="Run the frexport sidecar. Settings: --config YAML < FREXPORT_* environment "
                                   "< these flags.")
    s.add_argument("--config", metavar="FILE", help="YAML config (see config/frexport.example.yaml)")
    s.add_argument("--check-config", action="store_true",
                   help="validate the configuration, print the effective configuration (YAML) and exit")
    s.add_argument("--listen", help="host:port for /metrics, /healthz, /readyz (default 0.0.0.0:9464)")
    s.add_argument("--web-config-file", help="Prometheus web-config file: TLS and basic auth for the endpoints")
    s.add_argument("--sockets-dir", help="directory of rank-<N>.sock worker-server sockets (frexport.agent)")
    s.add_argument("--url", action="append", default=[], metavar="RANK=URL",
                   help="a rank's worker server over TCP, e.g. 3=http://10.0.0.7:25999 (repeatable)")
    s.add_argument("--recorder", action="append", default=[], metavar="BACKEND",
                   help="also read this backend's torch 2.15 recorder through PyTorch's handlers (an out-of-tree "
                        "backend, which only frexport.agent can list; repeatable)")
    s.add_argument("--dump-dir", action="append", default=[], metavar="DIR",
                   help="directory PyTorch writes dumps into (repeatable)")
    s.add_argument("--polling", action="store_true", help="poll dump dirs instead of inotify (NFS, shared volumes)")
    s.add_argument("--poll-interval", help="worker-server poll interval where a rank has no status-only read "
                   "(frexport.agent's), e.g. 5s")
    s.add_argument("--status-interval", help="how often each rank's status is read (status first), e.g. 1s")
    s.add_argument("--entries-interval", help="the longest a moving rank's entries wait to be fetched, e.g. 10s")
    s.add_argument("--entries-via", choices=("agent", "pytorch"),
                   help="whose handler serves the entries where frexport.agent runs: agent (the least CPU; its "
                        "dump holds the trainer's GIL, ~35 ms a read) or pytorch (C++, no GIL, more CPU)")
    s.add_argument("--stall-after", help="stall threshold, e.g. 2m (default: derived from the step time)")
    s.add_argument("--evidence-dir", help="where to write evidence bundles when a stall is seen")
    s.add_argument("--log-format", choices=("text", "json"))
    s.add_argument("--log-level", choices=("debug", "info", "warning", "error"))
    s.add_argument("--job-id", help="job identifier (trace ids, bundle names)")
    s.add_argument("--allow-no-memory-limit", action="store_true", default=None,
                   help="run even where the decoders' memory limit (RLIMIT_AS) cannot be set")
    s.add_argument("--peers-api", action="store_true",
                   help="serve the local ranks' live window on /api/v1/ranks for `frexport jobview` "
                        "(behind --web-config-file)")
    s.add_argument("--peers-api-unauthenticated", action="store_true",
                   help="allow --peers-api without a web config (no TLS, no auth): only on a trusted network")

    j = sub.add_parser("jobview", help="the job-level view: gather every pod's sidecar, diagnose the whole job",
                       description="Pull every peer sidecar's live window (their --peers-api), run the analysis "
                                   "on the whole job and write one evidence bundle per hang.")
    j.add_argument("--config", metavar="FILE", help="YAML config (the peers section)")
    j.add_argument("--check-config", action="store_true",
                   help="validate the configuration, print the effective configuration (YAML) and exit")
    j.add_argument("--peer", action="append", default=[], metavar="URL",
                   help="a peer sidecar, e.g. https://10.0.0.7:9464 (repeatable)")
    j.add_argument("--peers-service", metavar="HOST:PORT",
                   help="a headless Service whose addresses are the peer sidecars, e.g. train-frexport.ml.svc:9464")
    j.add_argument("--listen", help="host:port for this view's /metrics, /healthz, /readyz")
    j.add_argument("--web-config-file", help="Prometheus web-config file for this view's own endpoints")
    j.add_argument("--poll-interval", help="how often every peer is pulled, e.g. 5s")
    j.add_argument("--stall-after", help="stall threshold, e.g. 2m (default: derived from the step time)")
    j.add_argument("--evidence-dir", help="where to write the job's evidence bundles")
    j.add_argument("--log-format", choices=("text", "json"))
    j.add_argument("--job-id", help="job identifier")
    j.add_argument("--allow-no-memory-limit", action="store_true", default=None,
                   help="run even where the decoders' memory limit (RLIMIT_AS) cannot be set")
    j.add_argument("--peers-basic-auth-over-http", action="store_true", default=None,
                   help="send basic auth (peers.username) to peers over plain http (refused otherwise)")

    n = sub.add_parser("snapshot", help="fetch every rank's Flight Recorder now and write a dump directory",
                       description="Fetch all ranks' recorders now (like an on-demand dump) into a directory "
                                   "that `frexport analyze` reads.")
    n.add_argument("output", metavar="OUTDIR")
    n.add_argument("--sockets-dir", help="directory of rank-<N>.sock worker-server sockets")
    n.add_argument("--url", action="append", default=[], metavar="RANK=URL")
    n.add_argument("--timeout", type=_positive_float, default=10.0, help="per-rank request timeout, seconds")
    n.add_argument("--stacks", action="store_true", help="also save each rank's Python stacks (dump_traceback)")
    n.add_argument("--force", action="store_true",
                   help="write into OUTDIR even if it holds files (a mix of two snapshots misleads analyze)")
    n.add_argument("--rounds", type=int, default=1, metavar="N",
                   help="take N looks (OUTDIR/look_1, look_2, ...): `analyze OUTDIR` then says per process group "
                        "whether it is progressing or hung (default 1)")
    n.add_argument("--gap", type=_positive_float, default=None, metavar="SECONDS",
                   help="each rank is looked at again no sooner than this after it answered the look before "
                        "(default: analyze's stall threshold, 5 s: the least that can show a hang)")
    from frexport.cli.profile import add_parser as add_profile

    add_profile(sub)
    from frexport.cli.inject import add_parser as add_inject

    add_inject(sub)
    from frexport.cli.webhook import add_parser as add_webhook

    add_webhook(sub)
    return p


def _escape_unencodable_output() -> None:
    """File names are bytes: one that is not UTF-8 reaches us with surrogates (\udcff), which a strict
    UTF-8 stdout (PYTHONIOENCODING=utf-8:strict, some containers) cannot write. Shown escaped instead
    of ending the command with a traceback."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            try:
                reconfigure(errors="backslashreplace")
            except (ValueError, OSError):  # a replaced or closed stream: leave it as it is
                pass


class _Interrupts:
    """A Ctrl-C that lands while a finalizer runs (`__del__`, called by the collector wherever it
    happens to run) is printed as "Exception ignored" and lost there: the analysis went on to its end
    and exited 0. Here it is kept, and delivered to the main thread again once the finalizer is over
    (raised from the finalizer's hook itself, it would be lost the same way)."""

    def __init__(self) -> None:
        self.lost = False
        self._again: threading.Timer | None = None
        self._default = sys.unraisablehook
        sys.unraisablehook = self._hook

    def _hook(self, unraisable: Any) -> None:
        if not isinstance(unraisable.exc_value, KeyboardInterrupt):
            self._default(unraisable)
            return
        self.lost = True
        self._again = threading.Timer(0.05, _thread.interrupt_main)
        self._again.daemon = True
        self._again.start()

    def done(self) -> None:
        if self._again is not None:
            self._again.cancel()


def main(argv: list[str] | None = None) -> int:
    interrupts = _Interrupts()
    try:
        code = _run(argv)
        interrupted = interrupts.lost
    except BrokenPipeError:
        # `frexport analyze ... | head`: the reader left; not an error of ours, and no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # what a shell reports for a process ended by SIGPIPE
    except KeyboardInterrupt:  # Ctrl-C: the user asked for it, so no traceback
        interrupted = True
    finally:
        interrupts.done()
    if interrupted:
        sys.stderr.write("frexport: interrupted\n")
        return 130  # what a shell reports for a process ended by SIGINT
    return code


def _run(argv: list[str] | None) -> int:
    _escape_unencodable_output()
    args = build_parser().parse_args(argv)
    # one module per command, imported only when used (serve never loads the analyzer's CLI, and so on)
    module = importlib.import_module(f"frexport.cli.{args.command}")
    return getattr(module, f"run_{args.command}")(args)

if __name__ == "__main__":
    sys.exit(main())
