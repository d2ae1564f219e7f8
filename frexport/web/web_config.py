"""TLS and basic auth for the sidecar's endpoints, from a Prometheus web-config file.

The same format Prometheus and its exporters (exporter-toolkit) read, so operators reuse theirs:

    tls_server_config:
      cert_file: /etc/frexport/tls.crt
      key_file: /etc/frexport/tls.key
      client_ca_file: /etc/frexport/ca.crt          # optional: mutual TLS
      client_auth_type: RequireAndVerifyClientCert  # optional
      min_version: TLS12                            # optional (TLS12 or TLS13)
    basic_auth_users:
      prometheus: $2y$10$...                       # bcrypt hash (htpasswd -nBC 10 "" | tr -d ':')

Basic auth needs the `bcrypt` package (extra `frexport[auth]`); verified passwords are cached,
like exporter-toolkit does, so a scrape does not pay bcrypt's cost every time.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ssl
import threading
from dataclasses import dataclass, field
from typing import Callable

import yaml

from frexport.config import ConfigError

_CLIENT_AUTH = {"NoClientCert": ssl.CERT_NONE, "RequestClientCert": ssl.CERT_OPTIONAL,
                "RequireAnyClientCert": ssl.CERT_REQUIRED, "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
                "RequireAndVerifyClientCert": ssl.CERT_REQUIRED}
_VERSIONS = {"TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}


@dataclass
class WebConfig:
    wrap_socket: Callable | None = None
    authorize: Callable[[str | None], bool] | None = None
    users: dict[str, bytes] = field(default_factory=dict)


def load_web_config(path: str) -> WebConfig:
    try:
        with open(path) as f:
            doc = yaml.safe_load(f) or {}
    except OSError as exc:
        raise ConfigError(f"web.config_file: cannot read {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"web.config_file: {path} is not valid YAML: {exc}") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"web.config_file: {path}: expected a mapping")
    unknown = set(doc) - {"tls_server_config", "basic_auth_users", "http_server_config"}
    if unknown:
        raise ConfigError(f"web.config_file: unknown field {sorted(unknown)[0]}")
    out = WebConfig()
    tls = doc.get("tls_server_config")
    if tls:
        out.wrap_socket = _tls(tls)
    users = doc.get("basic_auth_users") or {}
    if users:
        if not isinstance(users, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in users.items()):
            raise ConfigError("web.config_file: basic_auth_users must map user names to bcrypt hashes")
        try:
            import bcrypt
        except ImportError:
            raise ConfigError("web.config_file: basic_auth_users needs the bcrypt package "
                              "(pip install 'frexport[auth]')") from None
        out.users = {u: h.encode() for u, h in users.items()}
        out.authorize = _BasicAuth(out.users, bcrypt.checkpw, _dummy_hash(out.users, bcrypt))
    return out


def _dummy_hash(users: dict[str, bytes], bcrypt) -> bytes:
    """A hash of the same cost as the users' (the highest), checked when the user is unknown: an unknown
    name then costs what a wrong password costs, so user names cannot be found by timing."""
    costs = [int(h[4:6]) for h in users.values() if h[:1] == b"$" and h[4:6].isdigit() and h[6:7] == b"$"]
    rounds = min(max(costs, default=10), 31)
    return bcrypt.hashpw(b"frexport-dummy", bcrypt.gensalt(rounds=max(4, rounds)))


def _tls(cfg: dict) -> Callable:
    if not isinstance(cfg, dict) or not cfg.get("cert_file") or not cfg.get("key_file"):
        raise ConfigError("web.config_file: tls_server_config needs cert_file and key_file")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = _VERSIONS.get(cfg.get("min_version", "TLS12"), ssl.TLSVersion.TLSv1_2)
    try:
        ctx.load_cert_chain(cfg["cert_file"], cfg["key_file"])
        if cfg.get("client_ca_file"):
            ctx.load_verify_locations(cfg["client_ca_file"])
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"web.config_file: TLS files: {exc}") from None
    mode = cfg.get("client_auth_type", "NoClientCert")
    if mode not in _CLIENT_AUTH:
        raise ConfigError(f"web.config_file: client_auth_type {mode!r} is not one of {', '.join(_CLIENT_AUTH)}")
    ctx.verify_mode = _CLIENT_AUTH[mode]
    return lambda sock: ctx.wrap_socket(sock, server_side=True)


class _BasicAuth:
    def __init__(self, users: dict[str, bytes], checkpw: Callable[[bytes, bytes], bool], dummy: bytes) -> None:
        self.users = users
        self.checkpw = checkpw
        self.dummy = dummy
        self._ok: set[bytes] = set()  # digests of verified "user:password" pairs
        self._lock = threading.Lock()

    def __call__(self, header: str | None) -> bool:
        if not header or not header.startswith("Basic "):
            return False
        try:
            user, _, password = base64.b64decode(header[6:], validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return False
        hashed = self.users.get(user)
        if hashed is None:
            try:
                self.checkpw(password.encode(), self.dummy)  # same cost as a wrong password
            except ValueError:
                pass
            return False
        digest = hashlib.sha256(hashed + b"\0" + password.encode()).digest()
        with self._lock:
            if any(hmac.compare_digest(digest, d) for d in self._ok):
                return True
        try:
            ok = self.checkpw(password.encode(), hashed)
        except ValueError:
            return False
        if ok:
            with self._lock:
                self._ok.add(digest)
        return ok
