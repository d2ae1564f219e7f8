"""Evidence bundles as the volume's other writers cannot fake them, and read without following links.

The evidence directory may be writable by others (a shared volume: another pod, a compromised
trainer). Two attacks this module closes (issue 28): a bundle, or a file in it, swapped for a symlink
after it was written, so that the upload ships the sidecar's own files (its TLS key) to object storage;
and planted directories carrying the public marker, so that retention deletes or keeps what an
attacker chose.

- Every manifest carries the SHA-256 of each file and an HMAC-SHA256 over itself, keyed by a secret
  only this sidecar holds: `.frexport-bundle-key` in the evidence directory, created by the sidecar
  (O_EXCL, O_NOFOLLOW, mode 0600) and read once per process only if it is a regular file of the
  sidecar's own user that nobody else can read; otherwise a key held in memory for this run (said in
  the log: bundles of earlier runs are then left alone by retention, never deleted on a guess).
  A writer running as another user can neither read the key nor forge a manifest.
- Everything is opened relative to a directory descriptor with O_NOFOLLOW (the bundle directory,
  each subdirectory, each file), fstat'ed as the kind it must be, and a file's bytes count only if
  their hash is the signed one. Deletion goes through shutil.rmtree with dir_fd (no link followed).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import stat
import threading

from frexport import logs

KEY_NAME = ".frexport-bundle-key"
MAX_MANIFEST = 1 << 20
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIR = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _NOFOLLOW
_keys: dict[tuple[int, int], bytes] = {}  # (st_dev, st_ino) of an evidence directory -> its key
_lock = threading.Lock()


class NotOurs(Exception):
    """A bundle (or one of its files) that this sidecar did not write as it is now: nothing of it is used."""


def bundle_key(directory: str) -> bytes:
    """The key of bundles in `directory`, loaded (or made) once per process."""
    st = os.stat(directory)
    with _lock:
        key = _keys.get((st.st_dev, st.st_ino))
        if key is None:
            key = _keys[(st.st_dev, st.st_ino)] = _load_or_create(directory)
        return key


def _load_or_create(directory: str) -> bytes:
    dfd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        try:
            fd = os.open(KEY_NAME, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600, dir_fd=dfd)
        except FileExistsError:
            try:
                return _read_key(dfd)
            except (OSError, ValueError, NotOurs) as exc:
                # not ours (planted, or not private any more): set aside, and a key of ours made in its
                # place, so that it changes nothing but that older bundles are left alone (one line)
                aside = f"{KEY_NAME}.not-ours-{secrets.token_hex(4)}"
                os.rename(KEY_NAME, aside, src_dir_fd=dfd, dst_dir_fd=dfd)
                logs.get().warning("evidence: %s in %s was not this sidecar's (%s): moved to %s and a new key made; "
                                   "bundles signed before are left alone by retention", KEY_NAME, directory, exc,
                                   aside)
                fd = os.open(KEY_NAME, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600, dir_fd=dfd)
        key = secrets.token_bytes(32)
        with os.fdopen(fd, "w") as f:
            f.write(key.hex())
        return key
    except (OSError, ValueError, NotOurs) as exc:
        logs.get().error("evidence: cannot keep the bundle key in %s (%s): this run signs its bundles with a key "
                         "held in memory, and retention leaves the bundles of earlier runs alone", directory, exc)
        return secrets.token_bytes(32)
    finally:
        os.close(dfd)


def _read_key(dfd: int) -> bytes:
    fd = os.open(KEY_NAME, os.O_RDONLY | os.O_NONBLOCK | _NOFOLLOW, dir_fd=dfd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077 or st.st_nlink != 1:
            raise NotOurs(f"{KEY_NAME} is not a private file of this user (mode {oct(st.st_mode)}, uid {st.st_uid})")
        key = bytes.fromhex(os.read(fd, 65).decode("ascii"))
    finally:
        os.close(fd)
    if len(key) != 32:
        raise ValueError(f"{KEY_NAME} does not hold a 256-bit key")
    return key


def sign(manifest: dict, key: bytes) -> dict:
    return {**manifest, "hmac": _mac(manifest, key)}


def _mac(manifest: dict, key: bytes) -> str:
    body = json.dumps({k: v for k, v in manifest.items() if k != "hmac"}, sort_keys=True, separators=(",", ":"))
    return hmac.new(key, body.encode(), hashlib.sha256).hexdigest()


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def open_bundle(parent_fd: int, name: str, key: bytes, check_name: bool = True) -> tuple[int, dict, bytes]:
    """(the bundle directory's descriptor, its verified manifest, the manifest's bytes); raises NotOurs
    or OSError. The signed manifest names the bundle: one found under another name (an older bundle
    swapped in, the incident's renamed) is not ours (`check_name`: off only to recognise a bundle of
    ours under any name). The caller closes the descriptor."""
    try:
        bfd = os.open(name, _DIR, dir_fd=parent_fd)  # a symlink in its place: ELOOP, never followed
    except OSError as exc:
        raise NotOurs(f"not a directory of its own ({exc.strerror})") from None
    try:
        raw = read_file(bfd, "manifest.json", MAX_MANIFEST)
        try:
            doc = json.loads(raw)
        except (ValueError, RecursionError):
            raise NotOurs("manifest.json is not JSON") from None
        if not isinstance(doc, dict) or not hmac.compare_digest(str(doc.get("hmac", "")), _mac(doc, key)):
            raise NotOurs("its manifest is not signed with this sidecar's bundle key")
        if check_name and doc.get("name") != name:
            raise NotOurs(f"its signed manifest names it {str(doc.get('name'))[:256]!r}: renamed or swapped in")
        return bfd, doc, raw
    except BaseException:
        os.close(bfd)
        raise


def read_file(dir_fd: int, rel: str, limit: int) -> bytes:
    """`rel` under the directory `dir_fd`, every component opened with O_NOFOLLOW: a regular file
    within `limit` bytes, else NotOurs."""
    parts = rel.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise NotOurs(f"{rel!r}: not a plain relative path")
    fds = []
    try:
        cur = dir_fd
        for p in parts[:-1]:
            cur = os.open(p, _DIR, dir_fd=cur)
            fds.append(cur)
        fd = os.open(parts[-1], os.O_RDONLY | os.O_NONBLOCK | _NOFOLLOW, dir_fd=cur)
        fds.append(fd)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotOurs(f"{rel}: not a regular file")
        if st.st_size > limit:
            raise NotOurs(f"{rel}: {st.st_size} bytes, over {limit}")
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read(limit + 1)[:limit]
    except OSError as exc:
        raise NotOurs(f"{rel}: {exc.strerror or exc} (a symbolic link is never followed)") from None
    finally:
        for fd in fds:
            os.close(fd)


def verified_files(bundle_fd: int, manifest: dict, limit: int) -> list[tuple[str, bytes]]:
    """Every file the signed manifest lists, each matching its signed hash; raises NotOurs."""
    hashes = manifest.get("sha256")
    if not isinstance(hashes, dict):
        raise NotOurs("its manifest lists no file hashes")
    out = []
    for rel in manifest.get("files", ()):
        data = read_file(bundle_fd, str(rel), limit)
        if digest(data) != hashes.get(rel):
            raise NotOurs(f"{rel}: its content is not what this sidecar wrote")
        out.append((str(rel), data))
    return out


def tree_size(dir_fd: int) -> int:
    """Bytes of the regular files under a directory descriptor, no link followed."""
    total = 0
    for _, _, files, fd in os.fwalk(".", dir_fd=dir_fd, follow_symlinks=False):
        for n in files:
            try:
                total += os.stat(n, dir_fd=fd, follow_symlinks=False).st_size
            except OSError:
                pass
    return total
