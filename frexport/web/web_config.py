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

Every exporter-toolkit option is honoured or refused at start-up with the reason, never accepted and
ignored (a `client_allowed_sans` that nothing checked let a client certificate for any name in):
honoured are cert_file, key_file, client_ca_file, client_auth_type, min_version and max_version
(TLS12, TLS13), cipher_suites (Go's names, mapped to OpenSSL's; TLS 1.2 only, as in Go),
prefer_server_cipher_suites, client_allowed_sans (any SAN of the verified client certificate: DNS,
IP, e-mail, URI; needs RequireAndVerifyClientCert), http_server_config.headers (added to every
answer) and http2: false. Refused: TLS10/TLS11 (insecure), curve_preferences (Python's ssl cannot
restrict key-exchange groups), http2: true (frexport serves HTTP/1.x), inline cert/key/client_ca,
a basic_auth_users value that is not a bcrypt hash (a plain-text password), and any field not listed here.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import ssl
import threading
from dataclasses import dataclass, field
from typing import Callable, cast

import yaml

from frexport.config import ConfigError

_CLIENT_AUTH = {"NoClientCert": ssl.CERT_NONE, "RequestClientCert": ssl.CERT_OPTIONAL,
                "RequireAnyClientCert": ssl.CERT_REQUIRED, "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
                "RequireAndVerifyClientCert": ssl.CERT_REQUIRED}
_VERSIONS = {"TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}


_TLS_FIELDS = {"cert_file", "key_file", "client_ca_file", "client_auth_type", "min_version", "max_version",
               "cipher_suites", "prefer_server_cipher_suites", "client_allowed_sans", "curve_preferences"}
_REFUSED_VERSIONS = {"TLS10", "TLS11"}
# Go's cipher suite names (crypto/tls, what exporter-toolkit reads) -> OpenSSL's
_CIPHERS = {
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
}
# headers that would break the answer's framing or the auth exchange: not for the operator to set
_RESERVED_HEADERS = {"content-length", "content-type", "transfer-encoding", "connection", "www-authenticate",
                     "date", "server"}
_SAN_KINDS = {"DNS", "IP Address", "email", "URI"}
# A bcrypt hash bcrypt.checkpw can verify: version, cost 4-31, 22 characters of salt and 31 of hash.
# Anything else made every login a 401 after a silent start; exporter-toolkit refuses it at start too
_BCRYPT = re.compile(r"\$2[abxy]\$(0[4-9]|[12][0-9]|3[01])\$[./A-Za-z0-9]{53}")


@dataclass
class WebConfig:
    wrap_socket: Callable | None = None
    authorize: Callable[[str | None], bool] | None = None
    users: dict[str, bytes] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)  # http_server_config.headers


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
    out.headers = _http_server_config(doc.get("http_server_config"))
    users = doc.get("basic_auth_users") or {}
    if users:
        if not isinstance(users, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in users.items()):
            raise ConfigError("web.config_file: basic_auth_users must map user names to bcrypt hashes")
        for user, hashed in users.items():
            if not _BCRYPT.fullmatch(hashed):  # the value is not echoed: it may be a password
                raise ConfigError(f"web.config_file: basic_auth_users: the value of user {user!r} is not a bcrypt "
                                  "hash (a plain-text password would refuse every login); hash the password: "
                                  "htpasswd -nBC 10 \"\" | tr -d ':'")
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


def _http_server_config(cfg) -> dict[str, str]:
    if cfg is None:
        return {}
    if not isinstance(cfg, dict):
        raise ConfigError("web.config_file: http_server_config must be a mapping")
    unknown = set(cfg) - {"http2", "headers"}
    if unknown:
        raise ConfigError(f"web.config_file: http_server_config.{sorted(unknown)[0]} is not an option frexport "
                          "knows (http2, headers)")
    if cfg.get("http2", False) is True:
        raise ConfigError("web.config_file: http_server_config.http2: true is not served (frexport speaks "
                          "HTTP/1.x); remove it or set false")
    headers = cfg.get("headers") or {}
    if not isinstance(headers, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items()):
        raise ConfigError("web.config_file: http_server_config.headers must map header names to strings")
    for k, v in headers.items():
        if k.lower() in _RESERVED_HEADERS or not k.replace("-", "").isalnum() or "\r" in v or "\n" in v:
            raise ConfigError(f"web.config_file: http_server_config.headers: {k!r} cannot be set "
                              "(framing, auth and line breaks are the server's)")
    return dict(headers)


def _version(cfg: dict, key: str, default: str) -> ssl.TLSVersion:
    v = cfg.get(key, default)
    if v in _REFUSED_VERSIONS:
        raise ConfigError(f"web.config_file: {key} {v}: TLS 1.0 and 1.1 are not offered (insecure); use TLS12 or TLS13")
    if v not in _VERSIONS:
        raise ConfigError(f"web.config_file: {key} {v!r} is not one of {', '.join(_VERSIONS)}")
    return _VERSIONS[v]


def _tls(cfg: dict) -> Callable:
    if not isinstance(cfg, dict) or not cfg.get("cert_file") or not cfg.get("key_file"):
        raise ConfigError("web.config_file: tls_server_config needs cert_file and key_file")
    unknown = set(cfg) - _TLS_FIELDS
    if unknown:
        raise ConfigError(f"web.config_file: tls_server_config.{sorted(unknown)[0]} is not an option frexport "
                          f"honours (it knows {', '.join(sorted(_TLS_FIELDS - {'curve_preferences'}))})")
    if cfg.get("curve_preferences"):
        raise ConfigError("web.config_file: tls_server_config.curve_preferences cannot be honoured (Python's ssl "
                          "cannot restrict the key-exchange groups); remove it")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = _version(cfg, "min_version", "TLS12")
    ctx.maximum_version = _version(cfg, "max_version", "TLS13")
    if ctx.maximum_version < ctx.minimum_version:
        raise ConfigError("web.config_file: max_version is below min_version")
    suites = cfg.get("cipher_suites")
    if suites:
        bad = [c for c in suites if c not in _CIPHERS] if isinstance(suites, list) else [suites]
        if bad:
            raise ConfigError(f"web.config_file: cipher_suites: {bad[0]!r} is not a suite frexport knows "
                              f"({', '.join(sorted(_CIPHERS))})")
        try:
            ctx.set_ciphers(":".join(_CIPHERS[c] for c in suites))
        except ssl.SSLError:
            raise ConfigError("web.config_file: cipher_suites: none of them is available here") from None
    if cfg.get("prefer_server_cipher_suites", True):
        ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    else:
        ctx.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
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
    if mode in ("RequestClientCert", "RequireAnyClientCert"):
        # Python's ssl verifies whatever certificate it asks for; "any certificate, unverified" cannot be had
        raise ConfigError(f"web.config_file: client_auth_type {mode} (a client certificate not verified) cannot be "
                          "honoured; use RequireAndVerifyClientCert or VerifyClientCertIfGiven with client_ca_file")
    if mode != "NoClientCert" and not cfg.get("client_ca_file"):
        raise ConfigError(f"web.config_file: client_auth_type {mode} needs client_ca_file")
    if mode == "NoClientCert" and cfg.get("client_ca_file"):  # the CA would be read and never used
        raise ConfigError("web.config_file: client_ca_file is set but client_auth_type is NoClientCert, so no "
                          "client certificate is asked for; set client_auth_type: RequireAndVerifyClientCert")
    sans = cfg.get("client_allowed_sans")
    if sans:
        if not isinstance(sans, list) or not all(isinstance(x, str) for x in sans):
            raise ConfigError("web.config_file: client_allowed_sans must be a list of names")
        if mode != "RequireAndVerifyClientCert":
            raise ConfigError("web.config_file: client_allowed_sans needs client_auth_type RequireAndVerifyClientCert")
        allowed = frozenset(sans)

        def wrap(sock):
            tls = ctx.wrap_socket(sock, server_side=True)
            # (for mypy) typeshed types getpeercert()'s values loosely: subjectAltName is (kind, name) pairs
            sans_got = cast("tuple[tuple[str, str], ...]", (tls.getpeercert() or {}).get("subjectAltName", ()))
            names = {v for kind, v in sans_got if kind in _SAN_KINDS}
            if not names & allowed:
                raise ssl.SSLError(f"client certificate names {sorted(names)[:4]} are not in client_allowed_sans")
            return tls
        return wrap
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
