"""A fake worker-server peer for faults a real PyTorch worker server cannot produce (slow, endless,
malformed answers). Tests that use it say so."""

from __future__ import annotations

import socket
import threading


class FakePeer:
    """A unix-socket server whose reply to every request is produced by `behave(conn)`."""

    def __init__(self, path, behave):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # path: str or bytes
        self.sock.bind(path)
        self.sock.listen(8)
        self.behave = behave
        self.stop = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn):
        try:
            conn.recv(65536)
            self.behave(conn)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self):
        self.stop = True
        self.sock.close()
