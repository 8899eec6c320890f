"""A loopback TCP proxy that can drop or stall every connection: a network fault on demand.

Put in front of a broker started with ``advertised_port=proxy.port`` so that every
client, including the ones that learn addresses from metadata, goes through it.
"""

from __future__ import annotations

import contextlib
import enum
import selectors
import socket
import threading
from types import TracebackType


class Mode(enum.Enum):
    PASS = "pass"  # forward bytes both ways
    STALL = "stall"  # keep connections open, forward nothing (a hung network)
    DROP = "drop"  # close every connection and refuse new ones (a broker gone)


class TcpProxy:
    """Forwards 127.0.0.1:``port`` to ``target_port``; :meth:`set_mode` injects the fault."""

    def __init__(self, target_port: int, port: int = 0) -> None:
        self._target = ("127.0.0.1", target_port)
        self._listener = socket.create_server(("127.0.0.1", port))
        self._listener.setblocking(False)
        self.port = self._listener.getsockname()[1]
        self._mode = Mode.PASS
        self._lock = threading.Lock()
        self._pairs: dict[socket.socket, socket.socket] = {}
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ)
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tcp-proxy", daemon=True)
        #: Connections closed by a switch to DROP, and new ones refused while in DROP: what
        #: a fault actually cut (a test or the soak asserts the fault met a connection).
        self.dropped = 0
        self.refused = 0

    def start(self) -> TcpProxy:
        self._thread.start()
        return self

    def set_mode(self, mode: Mode) -> None:
        with self._lock:
            self._mode = mode
            if mode is Mode.DROP:
                self.dropped += len(self._pairs) // 2
                for sock in list(self._pairs):
                    self._close(sock)

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=5)
        for sock in list(self._pairs):
            self._close(sock)
        self._listener.close()

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _run(self) -> None:
        while not self._stopped.is_set():
            for key, _ in self._selector.select(timeout=0.1):
                with self._lock:
                    if key.fileobj is self._listener:
                        self._accept()
                    elif key.fileobj in self._pairs and self._mode is Mode.PASS:
                        self._forward(key.fileobj)  # type: ignore[arg-type]

    def _accept(self) -> None:
        try:
            client, _ = self._listener.accept()
        except BlockingIOError:
            return
        if self._mode is Mode.DROP:
            self.refused += 1
            client.close()
            return
        try:
            upstream = socket.create_connection(self._target, timeout=2)
        except OSError:
            client.close()
            return
        for sock in (client, upstream):
            sock.setblocking(False)
            self._selector.register(sock, selectors.EVENT_READ)
        self._pairs[client], self._pairs[upstream] = upstream, client

    def _forward(self, sock: socket.socket) -> None:
        try:
            data = sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._close(sock)
            return
        try:
            self._pairs[sock].setblocking(True)
            self._pairs[sock].sendall(data)
            self._pairs[sock].setblocking(False)
        except OSError:
            self._close(sock)

    def _close(self, sock: socket.socket) -> None:
        peer = self._pairs.pop(sock, None)
        for s in (sock, peer):
            if s is None:
                continue
            self._pairs.pop(s, None)
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(s)
            s.close()
