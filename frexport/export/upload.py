"""Upload each finished evidence bundle to S3-compatible object storage, so it outlives the pod.

Standard library only (the sidecar image stays small and the agent-free path has no SDK): a PUT
per file, signed with AWS Signature Version 4, path-style by default (MinIO, Ceph RGW, moto, and
AWS S3 alike; `path_style: false` for virtual-hosted buckets). Keys:

    <prefix>/<job id>/<pod>/<bundle name>/<file>

so the bundles of every pod of every job sit side by side; `manifest.json` goes last, so a reader
that sees it sees a complete bundle. Runs on the evidence sink's thread, never on the sidecar's
loop; each file is retried with backoff on connection errors, 5xx, 408 and 429; any other answer
(a bad credential: 403) fails the bundle at once. Results: frexport_evidence_uploads_total{result}.

What is uploaded is read as bundle_files.py says: the bundle directory, each subdirectory and each
file opened relative to the evidence directory with O_NOFOLLOW, only the files the manifest signed
with this sidecar's key lists, each only if its bytes hash to the signed value. A bundle (or a file
in it) swapped for a symbolic link after it was written uploads nothing (result "refused") and the
log says why: the sidecar's own files (its TLS key) cannot be made to go to object storage.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import os
import re
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, Metric

from frexport import logs
from frexport.export.bundle_files import NotOurs, bundle_key, open_bundle, verified_files

_RETRY_STATUS = {408, 429, 500, 502, 503, 504}


@dataclass
class Target:
    endpoint: str  # http(s)://host[:port]
    bucket: str
    access_key_id: str
    secret_access_key: str
    region: str = "us-east-1"
    prefix: str = ""
    session_token: str = ""
    path_style: bool = True


class UploadError(Exception):
    def __init__(self, message: str, retry: bool) -> None:
        super().__init__(message)
        self.retry = retry


class BundleUploader:
    """Uploads bundle directories (called by the evidence sink's thread). It sits among the sidecar's
    sinks only so its self-metric is scraped beside theirs: it takes no passes."""

    name = "evidence_upload"

    def start(self) -> None:
        pass

    def consume(self, p: object) -> None:
        pass

    def stop(self, timeout_s: float) -> None:
        pass

    def __init__(self, target: Target, job_id: str = "", pod: str = "", retries: int = 3,
                 timeout_s: float = 30.0, backoff_s: float = 1.0) -> None:
        self.target = target
        self.job_id = job_id
        self.pod = pod or os.environ.get("POD_NAME") or socket.gethostname()
        self.retries = retries
        self.timeout_s = timeout_s
        self.backoff_s = backoff_s
        self.results = {"success": 0, "failed": 0, "refused": 0}
        self._lock = threading.Lock()

    def key_prefix(self, bundle_dir: str) -> str:
        parts = [self.target.prefix.strip("/"), self.job_id, self.pod, os.path.basename(bundle_dir.rstrip("/"))]
        return "/".join(p for p in parts if p)

    def upload(self, bundle_dir: str) -> bool:
        """Upload every file of the bundle, the manifest last; True when all arrived. Never raises."""
        try:
            files = read_bundle(bundle_dir)
        except (NotOurs, OSError) as exc:
            self._count("refused")
            logs.get().error("evidence upload of %s refused, nothing of it uploaded: %s", bundle_dir, exc,
                             extra={"path": bundle_dir, "error": str(exc)})
            return False
        base = self.key_prefix(bundle_dir)
        try:
            for rel, body in files:
                self._put_with_retries(f"{base}/{rel}", body)
        except (UploadError, OSError) as exc:
            self._count("failed")
            logs.get().error("evidence upload of %s to %s/%s failed: %s", bundle_dir, self.target.endpoint,
                             self.target.bucket, exc, extra={"path": bundle_dir, "error": str(exc)})
            return False
        self._count("success")
        logs.get().info("evidence bundle uploaded: s3://%s/%s/", self.target.bucket, base,
                        extra={"path": bundle_dir})
        return True

    def describe(self) -> Iterator[Metric]:
        yield _family()

    def collect(self) -> Iterator[Metric]:
        c = _family()
        with self._lock:
            for result, n in sorted(self.results.items()):
                c.add_metric([result], n)
        yield c

    def _count(self, result: str) -> None:
        with self._lock:
            self.results[result] += 1

    def _put_with_retries(self, key: str, body: bytes) -> None:
        for attempt in range(self.retries + 1):
            try:
                put_object(self.target, key, body, self.timeout_s)
                return
            except UploadError as exc:
                if not exc.retry or attempt == self.retries:
                    raise
            time.sleep(self.backoff_s * 2 ** attempt)


def put_object(t: Target, key: str, body: bytes, timeout_s: float = 30.0,
               now: dt.datetime | None = None) -> None:
    """One signed PUT; raises UploadError (retry says whether trying again may help)."""
    url, headers = sign_put(t, key, body, now or dt.datetime.now(dt.timezone.utc))
    # an explicit type: urllib's default for a body (a form) makes some servers parse it as one
    ctype = {".json": "application/json", ".txt": "text/plain; charset=utf-8"}.get(os.path.splitext(key)[1],
                                                                                  "application/octet-stream")
    req = urllib.request.Request(url, data=body, method="PUT", headers={**headers, "Content-Type": ctype})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            r.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read()[:2000].decode(errors="replace")
        code = re.search(r"<Code>([^<]+)</Code>", detail)
        raise UploadError(f"PUT {key}: HTTP {exc.code} {code.group(1) if code else exc.reason}",
                          exc.code in _RETRY_STATUS) from None
    except (urllib.error.URLError, OSError) as exc:
        raise UploadError(f"PUT {key}: {getattr(exc, 'reason', exc)}", True) from None


def sign_put(t: Target, key: str, body: bytes, now: dt.datetime) -> tuple[str, dict[str, str]]:
    """The URL and headers of a SigV4-signed PutObject (the payload's SHA-256 is signed too)."""
    ep = urllib.parse.urlsplit(t.endpoint.rstrip("/"))
    host = ep.netloc if t.path_style else f"{t.bucket}.{ep.netloc}"
    path = ep.path + (f"/{t.bucket}/{key}" if t.path_style else f"/{key}")
    path = urllib.parse.quote(path, safe="/~")  # S3 signs the path encoded once, '/' kept
    amz_date = now.strftime("%Y%m%dT%H%M%SZ")
    day = amz_date[:8]
    payload = hashlib.sha256(body).hexdigest()
    headers = {"host": host, "x-amz-content-sha256": payload, "x-amz-date": amz_date}
    if t.session_token:
        headers["x-amz-security-token"] = t.session_token
    signed = ";".join(sorted(headers))
    canonical = "\n".join(["PUT", path, "", *(f"{k}:{headers[k].strip()}" for k in sorted(headers)), "",
                           signed, payload])
    scope = f"{day}/{t.region}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    k = _hmac(("AWS4" + t.secret_access_key).encode(), day)
    for part in (t.region, "s3", "aws4_request"):
        k = _hmac(k, part)
    signature = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["authorization"] = (f"AWS4-HMAC-SHA256 Credential={t.access_key_id}/{scope}, "
                                f"SignedHeaders={signed}, Signature={signature}")
    headers.pop("host")  # urllib sets Host from the URL, to the same value
    return f"{ep.scheme}://{host}{path}", headers


def _hmac(key: bytes, msg: str) -> bytes:
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


MAX_FILE_BYTES = 4 << 30  # no bundle file is larger (evidence.max_bytes bounds the whole bundle)


def read_bundle(bundle_dir: str) -> list[tuple[str, bytes]]:
    """(relative name, bytes) of every file of a bundle this sidecar signed, the manifest last; raises
    NotOurs (with the reason) or OSError. Nothing is read through a link."""
    parent, name = os.path.split(os.path.normpath(bundle_dir))
    key = bundle_key(parent)
    pfd = os.open(parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        bfd, manifest, raw = open_bundle(pfd, name, key)
        try:
            return verified_files(bfd, manifest, MAX_FILE_BYTES) + [("manifest.json", raw)]
        finally:
            os.close(bfd)
    finally:
        os.close(pfd)


def _family() -> CounterMetricFamily:
    return CounterMetricFamily("frexport_evidence_uploads", "Evidence bundles uploaded to object storage, by result",
                               labels=["result"])
