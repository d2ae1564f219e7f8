"""`frexport serve` configuration: one YAML file, FREXPORT_* environment overrides, CLI flags.

Precedence: defaults < YAML file < environment < command line. Every field is
validated at start; an error names the field (`sources.worker_servers.timeout:
expected a duration like 5s, got 'soon'`). The environment uses the field path
in upper case with `__` between levels, e.g.
FREXPORT_SOURCES__WORKER_SERVERS__SOCKETS_DIR=/shared/frexport.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field, fields
from typing import Any, cast, get_args, get_origin, get_type_hints
from urllib.parse import urlsplit

import yaml


class ConfigError(ValueError):
    pass


@dataclass
class DumpDir:
    path: str = ""
    prefix: str | None = None
    polling: bool = False  # use for NFS and other shared volumes: inotify misses writes from other hosts
    poll_interval: float = 2.0
    settle: float = 1.0
    rescan_interval: float = 30.0  # a full rescan covers what watch events can miss (queue overflow)
    timeout_dumps: bool = True  # these are PyTorch's dumps (count them); false for periodic snapshots
    follow_symlinks: bool = False
    max_file_bytes: int = 512 * 1024 * 1024
    # newest entries kept per dump, as for worker servers: a 2 MB pickle repeating one entry by
    # reference stood for a million of them (32 -> 1706 MB for four files)
    max_entries: int = 20000


@dataclass
class WorkerServers:
    sockets_dir: str | None = None
    urls: dict[int, str] = field(default_factory=dict)  # rank -> http://host:port
    poll_interval: float = 5.0  # a rank whose worker server has no status-only read: its whole dump this often
    # Status first (where frexport.agent serves `frexport_fr_status`): every rank's status this often,
    # its entries only when a group moved and at most every `entries_interval`, at once when a stall
    # is suspected, and before the ring buffer can wrap (sources/entry_schedule.py).
    status_first: bool = True
    status_interval: float = 1.0
    entries_interval: float = 10.0
    # Whose handler serves a rank's entries where frexport.agent runs: "agent" sends only those from the
    # sidecar's cursor on, cut out of PyTorch's pickle dump (the least CPU on both sides), but that dump
    # runs in Python and holds the trainer's GIL: its training loop pauses ~35 ms a read of a 2000-entry
    # buffer. "pytorch": PyTorch's C++ JSON handler, which holds no GIL (no pause), at ~1.7x the dump's
    # CPU on a worker-server thread and a whole buffer for the sidecar to parse (docs/agent.md).
    entries_via: str = "agent"
    # work pending and a status that has not moved for this long: a stall is suspected, every rank's
    # entries are fetched at once. Shorter than any stall threshold worth paging for; not so short
    # that a rank the CPU scheduler left waiting a second sets it off in a busy job.
    suspect_after: float = 2.0
    timeout: float = 5.0
    concurrency: int = 8
    backoff_max: float = 60.0
    max_body_bytes: int = 64 * 1024 * 1024  # 2000 entries are about 1 MB of JSON
    # per rank snapshot, shared by its recorders; older entries are dropped (noted), memory stays bounded
    max_entries: int = 20000
    startup_grace: float = 60.0  # a sockets dir without a socket this long (the trainer starting) is down
    # backends whose torch 2.15 recorders to look for through PyTorch's own handlers, beyond those torch
    # ships (out-of-tree backends: PyTorch lists no recorders; frexport.agent does, and needs none of this)
    recorders: list[str] = field(default_factory=list)


ENTRIES_VIA = ("agent", "pytorch")
_RECORDER_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")


def recorder_name_ok(name: object) -> bool:
    """A recorder (backend) name, from a rank's answer or the config, goes into a URL as it is, a label
    and a directory name: short, plain ASCII (str.isalnum let 'ŝ' through, which the request line cannot
    encode), never a path of its own."""
    return isinstance(name, str) and _RECORDER_NAME.fullmatch(name) is not None and name not in (".", "..")


@dataclass
class Sources:
    dump_dirs: list[DumpDir] = field(default_factory=list)
    worker_servers: WorkerServers = field(default_factory=WorkerServers)


@dataclass
class Decode:
    """The sandboxed decoder processes every untrusted file and large body goes through."""

    workers: int = 2
    memory_limit: int = 2 * 1024 * 1024 * 1024  # address space a decoder may add (RLIMIT_AS)
    timeout: float = 60.0  # per item
    allow_no_memory_limit: bool = False  # decode even where RLIMIT_AS cannot be set (said at start)
    in_process_max_bytes: int = 1024 * 1024  # worker-server bodies up to this are parsed in the sidecar


@dataclass
class Analysis:
    interval: float = 5.0
    # while a source suspects a stall (status first: work pending that stopped moving), this often:
    # a stall is named as it passes the threshold, at the cost of passes only while one is suspected
    suspected_interval: float = 0.5
    window: int = 256  # newest entries per rank the live analysis looks at (plus all unfinished ones)
    stall_after: float | None = None  # None: derived from the observed step time, within the bounds below
    min_stall_after: float = 30.0
    max_stall_fraction_of_timeout: float = 0.5
    straggler_lateness: float = 0.05
    rank_expiry: float = 600.0


@dataclass
class EvidenceUpload:
    """S3-compatible object storage each finished bundle is uploaded to (export/upload.py)."""
    endpoint: str | None = None  # http(s)://host[:port]; None: no upload
    bucket: str | None = None
    prefix: str = ""  # keys: <prefix>/<job id>/<pod>/<bundle>/<file>
    region: str = "us-east-1"
    path_style: bool = True  # false: virtual-hosted (<bucket>.<host>)
    access_key_id: str | None = None  # None: AWS_ACCESS_KEY_ID from the environment (a Secret)
    secret_access_key: str | None = None  # None: AWS_SECRET_ACCESS_KEY
    session_token: str | None = None  # None: AWS_SESSION_TOKEN, if any
    retries: int = 3
    timeout: float = 30.0


@dataclass
class EvidenceProfile:
    """On a new straggler finding, a short PyTorch profiler trace of the straggler and one peer
    (evidence/profiles.py), in a bundle of its own, at most one per rank per `interval`."""
    enabled: bool = True
    duration: float = 5.0  # seconds profiled; the agent refuses over 30
    interval: float = 600.0  # the same rank is profiled at most once in this many seconds


@dataclass
class Evidence:
    dir: str | None = None
    max_bundles: int = 20
    max_bytes: int = 1024 * 1024 * 1024
    pyspy: bool = True  # also ask the worker server for a py-spy dump (needs py-spy in the trainer image)
    deadline: float = 20.0  # for fetching a bundle's stacks and pickles from every rank, all at once
    # native stacks (py-spy --native, else gdb; evidence/native.py) of this many culprits and blocked
    # ranks per incident bundle; 0 (the default, like pyspy in the chart: it needs the trainer's pid
    # namespace and SYS_PTRACE, and stops the rank while it reads it): none
    native_stacks: int = 0
    profile: EvidenceProfile = field(default_factory=EvidenceProfile)
    upload: EvidenceUpload = field(default_factory=EvidenceUpload)


@dataclass
class Web:
    listen: str = "0.0.0.0:9464"
    config_file: str | None = None  # Prometheus web-config file: TLS and basic auth (see web_config.py)


@dataclass
class Metrics:
    """Bounds on what one scrape may hold, whatever the dumps and peers say (docs/metrics.md)."""

    max_series_per_family: int = 50_000  # exposition lines of one family; more are dropped, counted
    max_label_chars: int = 256  # longer label values are cut, with a hash of the whole
    max_label_sets: int = 256  # (pg_desc, op) pairs counted, and process groups kept per rank


@dataclass
class Traces:
    enabled: bool = False
    queue_size: int = 20000
    checkpoint_file: str | None = None


@dataclass
class Peers:
    """Sidecar to sidecar (docs/multi-node.md): `serve` puts this sidecar's live window on
    /api/v1/ranks beside /metrics, behind the same web config; the rest is for `frexport jobview`,
    which pulls every peer sidecar (`urls`, or every address of the headless Service `service`)."""

    serve: bool = False
    allow_unauthenticated: bool = False  # serve it with no web config (TLS/basic auth): an explicit choice
    urls: list[str] = field(default_factory=list)  # http(s)://host:port of each peer sidecar
    service: str | None = None  # host:port, a headless Service name resolved to all its addresses
    scheme: str = "http"  # for the Service's addresses
    discovery_interval: float = 30.0
    poll_interval: float = 5.0
    timeout: float = 10.0
    concurrency: int = 16
    # a pod's answer (its ranks' windows: about 1 MB for 8) or one rank's pickle with frames; at most
    # `concurrency` of them are read at once, each held about twice while it is joined and parsed
    max_body_bytes: int = 32 * 1024 * 1024
    ca_file: str | None = None  # verify the peers' TLS certificates against this CA
    cert_file: str | None = None  # client certificate (mutual TLS)
    key_file: str | None = None
    server_name: str | None = None  # the name the peers' certificates carry (one for all pods)
    username: str | None = None  # basic auth to the peers: only over https (the password would travel in clear)
    password_file: str | None = None
    allow_basic_auth_over_http: bool = False  # knowingly send it over plain http (a network nothing else sees)
    stacks: int = 4  # blocked ranks whose stacks join the culprits' in a job bundle


@dataclass
class Log:
    format: str = "text"  # text | json
    level: str = "info"


@dataclass
class Config:
    job_id: str | None = None
    world_size: int | None = None
    max_ranks: int = 4096
    sources: Sources = field(default_factory=Sources)
    decode: Decode = field(default_factory=Decode)
    analysis: Analysis = field(default_factory=Analysis)
    evidence: Evidence = field(default_factory=Evidence)
    web: Web = field(default_factory=Web)
    metrics: Metrics = field(default_factory=Metrics)
    traces: Traces = field(default_factory=Traces)
    peers: Peers = field(default_factory=Peers)
    log: Log = field(default_factory=Log)


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_SIZE = re.compile(r"^\s*(\d+)\s*(B|KiB|MiB|GiB|KB|MB|GB)?\s*$")
_SIZE_UNITS = {None: 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "KB": 10**3, "MB": 10**6,
               "GB": 10**9}
_DURATION_UNITS = {None: 1.0, "ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION_FIELDS = {"poll_interval", "settle", "rescan_interval", "timeout", "backoff_max", "interval", "stall_after",
                    "min_stall_after", "straggler_lateness", "rank_expiry", "deadline", "startup_grace",
                    "discovery_interval", "status_interval", "entries_interval", "suspect_after",
                    "suspected_interval", "duration"}
# max_entries is a count
_SIZE_FIELDS = {"max_body_bytes", "max_bytes", "max_file_bytes", "memory_limit", "in_process_max_bytes"}


def load_config(path: str | None = None, env: dict[str, str] | None = None,
                overrides: dict[str, Any] | None = None) -> Config:
    data: dict[str, Any] = {}
    if path:
        try:
            with open(path) as f:
                loaded = yaml.safe_load(f)
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML: {exc}") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"{path}: the top level must be a mapping")
        data = loaded or {}
    for key, value in sorted((env if env is not None else os.environ).items()):
        if key.startswith("FREXPORT_") and "__" in key[9:] or key in _ENV_TOP:
            # kept as text: each field converts it to its own type (a job named "true" stays a name)
            _set_path(data, key[9:].lower().split("__"), _EnvText(value))
    for dotted, value in (overrides or {}).items():
        if value is not None:
            _set_path(data, dotted.split("."), value)
    return _build(Config, data, "")


_ENV_TOP = {"FREXPORT_JOB_ID", "FREXPORT_WORLD_SIZE", "FREXPORT_MAX_RANKS"}
_BOOLS = {"true": True, "yes": True, "on": True, "1": True, "false": False, "no": False, "off": False, "0": False}


class _EnvText(str):
    """A value from the environment: text that each field converts to its own type."""


def _set_path(data: dict, parts: list[str], value: Any) -> None:
    node = data
    for p in parts[:-1]:
        node = node.setdefault(p, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{'.'.join(parts)}: cannot set inside a non-mapping")
    node[parts[-1]] = value


def _build(cls: type, data: Any, where: str) -> Any:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where or 'config'}: expected a mapping, got {type(data).__name__}")
    hints = get_type_hints(cls)
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{where + '.' if where else ''}{unknown[0]}: unknown field "
                          f"(known: {', '.join(sorted(known))})")
    kwargs = {}
    for f in fields(cls):
        if f.name in data:
            kwargs[f.name] = _value(hints[f.name], data[f.name], f"{where + '.' if where else ''}{f.name}", f.name)
    return cls(**kwargs)


def _value(tp: Any, v: Any, where: str, name: str) -> Any:
    origin, args = get_origin(tp), get_args(tp)
    if isinstance(v, _EnvText):
        v = _from_env(tp, str(v), where)
    if args and type(None) in args:  # Optional[X]
        if v is None:
            return None
        tp = next(a for a in args if a is not type(None))
        origin, args = get_origin(tp), get_args(tp)
    if dataclasses.is_dataclass(tp):
        return _build(cast(type, tp), v, where)  # a field's type: a class, not an instance
    if origin is list:
        if not isinstance(v, list):
            raise ConfigError(f"{where}: expected a list, got {v!r}")
        return [_value(args[0], x, f"{where}[{i}]", name) for i, x in enumerate(v)]
    if origin is dict:
        if not isinstance(v, dict):
            raise ConfigError(f"{where}: expected a mapping, got {v!r}")
        return {_value(args[0], k, f"{where} key", name): _value(args[1], x, f"{where}.{k}", name)
                for k, x in v.items()}
    if tp is bool:
        if isinstance(v, bool):
            return v
        raise ConfigError(f"{where}: expected true or false, got {v!r}")
    if tp is float and name in _DURATION_FIELDS:
        return _duration(v, where)
    if tp is int and name in _SIZE_FIELDS:
        return _size(v, where)
    if tp is int:
        if isinstance(v, bool) or not isinstance(v, int) and not (isinstance(v, str) and v.isdecimal()):
            raise ConfigError(f"{where}: expected an integer, got {v!r}")
        return int(v)
    if tp is float:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ConfigError(f"{where}: expected a number, got {v!r}")
        return float(v)
    if tp is str:
        if not isinstance(v, (str, int)) or isinstance(v, bool):
            raise ConfigError(f"{where}: expected a string, got {v!r}")
        return str(v)
    raise ConfigError(f"{where}: unsupported value {v!r}")


def _from_env(tp: Any, text: str, where: str) -> Any:
    """Environment text to the field's type: strings stay strings; structures are YAML."""
    args = get_args(tp)
    if args and type(None) in args:
        if text == "":
            return None
        tp = next(a for a in args if a is not type(None))
    if tp is str:
        return text
    if tp is bool:
        if text.lower() not in _BOOLS:
            raise ConfigError(f"{where}: expected true or false, got {text!r}")
        return _BOOLS[text.lower()]
    if get_origin(tp) in (list, dict) or dataclasses.is_dataclass(tp):
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{where}: not valid YAML: {exc}") from None
    if tp is float:
        try:
            return float(text)
        except ValueError:
            return text  # durations like 5s: converted by the field
    return text


def _duration(v: Any, where: str) -> float:
    if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0:
        return float(v)
    m = _DURATION.match(str(v))
    if not m or isinstance(v, bool):
        raise ConfigError(f"{where}: expected a duration like 500ms, 5s, 2m or 1h, got {v!r}")
    return float(m.group(1)) * _DURATION_UNITS[m.group(2)]


def _size(v: Any, where: str) -> int:
    if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
        return v
    m = _SIZE.match(str(v))
    if not m or isinstance(v, bool):
        raise ConfigError(f"{where}: expected a size like 512MiB or 1GiB, got {v!r}")
    return int(m.group(1)) * _SIZE_UNITS[m.group(2)]


def parse_worker_address(spec: str) -> tuple[str | None, str, int]:
    """'unix:///run/x.sock', '/run/x.sock' or 'http://host:port' -> (socket path or None, host, port)."""
    if spec.startswith("unix://"):
        return spec[len("unix://"):], "", 0
    if spec.startswith("/"):
        return spec, "", 0
    parts = urlsplit(spec if "://" in spec else "http://" + spec)
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme != "http" or not parts.hostname or not port:
        raise ValueError(f"not a worker-server address: {spec!r} (use http://host:port or a socket path)")
    return None, parts.hostname, port


def validate(cfg: Config, job_view: bool = False) -> list[str]:
    """Cross-field checks; returns problems as 'field: message'. `job_view`: for `frexport jobview`,
    whose only source is the peer sidecars."""
    problems = []
    ws = cfg.sources.worker_servers
    pc = cfg.peers
    if pc.serve and not cfg.web.config_file and not pc.allow_unauthenticated:
        problems.append("peers.serve: the peers endpoint serves every local rank's recorder; set web.config_file "
                        "(TLS, basic auth) or, knowingly, peers.allow_unauthenticated")
    if pc.scheme not in ("http", "https"):
        problems.append(f"peers.scheme: expected http or https, got {pc.scheme!r}")
    if bool(pc.cert_file) != bool(pc.key_file):
        problems.append("peers.cert_file, peers.key_file: give both or neither")
    if bool(pc.username) != bool(pc.password_file):
        problems.append("peers.username, peers.password_file: give both or neither")
    if job_view:
        if not pc.urls and not pc.service:
            problems.append("peers: nothing to gather (set peers.urls or peers.service)")
        for i, url in enumerate(pc.urls):
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                problems.append(f"peers.urls[{i}]: expected http(s)://host:port, got {url!r}")
        if pc.service and not pc.service.rpartition(":")[2].isdecimal():
            problems.append(f"peers.service: expected host:port, got {pc.service!r}")
        plain = [u for u in pc.urls if urlsplit(u).scheme == "http"] + \
            ([f"{pc.scheme}://{pc.service}"] if pc.service and pc.scheme == "http" else [])
        tls_set = [k for k in ("ca_file", "cert_file", "server_name") if getattr(pc, k)]
        if tls_set and plain and len(plain) == len(pc.urls) + (1 if pc.service else 0):
            problems.append(f"peers.{tls_set[0]}: set, but every peer is plain http ({plain[0]}), so it would never "
                            "be used; use https:// peers (peers.scheme: https for peers.service)")
        if pc.username and plain and not pc.allow_basic_auth_over_http:
            problems.append(f"peers.username: basic auth would send the password in clear text to {plain[0]}"
                            f"{f' and {len(plain) - 1} more' if len(plain) > 1 else ''}; use https (peers.scheme, "
                            "peers.ca_file) or, on a network nothing else sees, peers.allow_basic_auth_over_http")
    elif not cfg.sources.dump_dirs and not ws.sockets_dir and not ws.urls:
        problems.append("sources: nothing to watch (set sources.dump_dirs, sources.worker_servers.sockets_dir "
                        "or sources.worker_servers.urls)")
    for i, d in enumerate(cfg.sources.dump_dirs):
        if not d.path:
            problems.append(f"sources.dump_dirs[{i}].path: required")
    for rank, url in ws.urls.items():
        try:
            parse_worker_address(url)
        except ValueError as exc:
            problems.append(f"sources.worker_servers.urls.{rank}: {exc}")
    if cfg.world_size is not None and cfg.world_size < 1:
        problems.append("world_size: must be at least 1")
    for i, name in enumerate(ws.recorders):
        if not recorder_name_ok(name):
            problems.append(f"sources.worker_servers.recorders[{i}]: {name!r} is not a backend name "
                            "(1 to 64 ASCII letters, digits, '-', '_', '.')")
    if ws.entries_via not in ENTRIES_VIA:
        problems.append(f"sources.worker_servers.entries_via: {ws.entries_via!r}: one of {', '.join(ENTRIES_VIA)}")
    for name in ("poll_interval", "status_interval", "entries_interval", "suspect_after"):
        if getattr(ws, name) <= 0:
            problems.append(f"sources.worker_servers.{name}: must be positive")
    if cfg.decode.workers < 1:
        problems.append("decode.workers: must be at least 1")
    if ws.concurrency < 1:
        problems.append("sources.worker_servers.concurrency: must be at least 1")
    if cfg.evidence.deadline <= 0:
        problems.append("evidence.deadline: must be positive")
    if not 0 < cfg.evidence.profile.duration <= 30:
        problems.append("evidence.profile.duration: must be above 0 and at most 30 s (the agent's bound)")
    if cfg.evidence.profile.interval < 0 or cfg.evidence.native_stacks < 0:
        problems.append("evidence.profile.interval and evidence.native_stacks: must not be negative")
    if cfg.analysis.stall_after is not None and cfg.analysis.stall_after <= 0:
        problems.append("analysis.stall_after: must be positive (every wait would be a stall); "
                        "null derives it from the step time")
    up = cfg.evidence.upload
    if up.endpoint:
        if not up.endpoint.startswith(("http://", "https://")):
            problems.append(f"evidence.upload.endpoint: expected http(s)://host[:port], got {up.endpoint!r}")
        if not up.bucket:
            problems.append("evidence.upload.bucket: required with evidence.upload.endpoint")
        if not cfg.evidence.dir:
            problems.append("evidence.upload: needs evidence.dir (bundles are written, then uploaded)")
        if not (up.access_key_id or os.environ.get("AWS_ACCESS_KEY_ID")) or \
                not (up.secret_access_key or os.environ.get("AWS_SECRET_ACCESS_KEY")):
            problems.append("evidence.upload: no credentials (access_key_id/secret_access_key, or "
                            "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY in the environment)")
        if up.retries < 0 or up.timeout <= 0:
            problems.append("evidence.upload: retries must be >= 0 and timeout positive")
    if cfg.analysis.interval <= 0:
        problems.append("analysis.interval: must be positive")
    if cfg.analysis.suspected_interval <= 0:
        problems.append("analysis.suspected_interval: must be positive")
    if not 0 < cfg.analysis.max_stall_fraction_of_timeout <= 1:
        problems.append("analysis.max_stall_fraction_of_timeout: must be in (0, 1]")
    m = cfg.metrics
    if m.max_series_per_family < 1 or m.max_label_sets < 1:
        problems.append("metrics.max_series_per_family, metrics.max_label_sets: must be at least 1")
    if m.max_label_chars < 32:
        problems.append("metrics.max_label_chars: must be at least 32 (room for the hash of a cut value)")
    if cfg.log.format not in ("text", "json"):
        problems.append(f"log.format: expected text or json, got {cfg.log.format!r}")
    if cfg.log.level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        problems.append(f"log.level: expected debug, info, warning or error, got {cfg.log.level!r}")
    host, sep, port = cfg.web.listen.rpartition(":")
    if not sep or not port.isdecimal() or not 0 <= int(port) < 65536:
        problems.append(f"web.listen: expected host:port, got {cfg.web.listen!r}")
    return problems


def effective_yaml(cfg: Config) -> str:
    """The configuration as it will run, in the file's own shape (durations in seconds, sizes in bytes)."""
    return "# effective configuration (durations in seconds, sizes in bytes)\n" + \
        yaml.safe_dump(dataclasses.asdict(cfg), sort_keys=False, default_flow_style=False)
