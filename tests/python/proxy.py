"""A loopback TCP proxy for outage tests: forwards to a real server, refuses (accepts and
resets at once), or blackholes (holds connections open and passes nothing, as a dropped
network does; bytes held back are delivered once it forwards again).

    with Proxy(3307) as p:           # listens on 127.0.0.1:<p.port>
        p.mode = "blackhole"
        ...
        p.mode = "forward"

Threads, not asyncio: the tests drive asyncio loops of their own, which the proxy must
never share."""

from __future__ import annotations

import socket
import struct
import threading
import time
from typing import Any, Literal, Optional

Mode = Literal["forward", "refuse", "blackhole"]


class Proxy:
    """Listens on an ephemeral loopback port and relays to ``127.0.0.1:upstream``."""

    def __init__(self, upstream: int, mode: Mode = "forward") -> None:
        self.upstream = upstream
        self.mode: Mode = mode
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name="proxy-accept").start()

    def __enter__(self) -> "Proxy":
        return self

    def __exit__(self, *_exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Stops listening and closes every relayed connection."""
        self._closed = True
        self._listener.close()
        with self._lock:
            for s in self._sockets:
                _close(s)

    def _keep(self, s: socket.socket) -> None:
        with self._lock:
            self._sockets.append(s)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self.mode == "refuse":
                _reset(client)
                continue
            self._keep(client)
            threading.Thread(target=self._open, args=(client,), daemon=True).start()

    def _open(self, client: socket.socket) -> None:
        self._hold()
        try:
            server = socket.create_connection(("127.0.0.1", self.upstream))
        except OSError:
            _reset(client)
            return
        self._keep(server)
        for src, dst in ((client, server), (server, client)):
            threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _hold(self) -> None:
        """Waits while blackholed (a new connection hangs, as in a real blackhole)."""
        while self.mode == "blackhole" and not self._closed:
            time.sleep(0.01)

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            self._hold()
            if not data or self.mode == "refuse" or self._closed:
                _reset(src)
                _reset(dst)
                return
            try:
                dst.sendall(data)
            except OSError:
                _reset(src)
                return


def _reset(s: socket.socket) -> None:
    """Closes with RST (as a refused or broken connection looks to the client)."""
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    _close(s)


def _close(s: Optional[socket.socket]) -> None:
    try:
        if s is not None:
            s.close()
    except OSError:
        pass


class ProxyProcess:
    """A `Proxy` in a child process, for measurements: its threads then never compete
    with the measured process for the GIL. Same `port`, `mode` and `close()`."""

    def __init__(self, upstream: int, mode: Mode = "forward") -> None:
        import subprocess
        import sys

        self.upstream = upstream
        self._child = subprocess.Popen(
            [sys.executable, __file__, str(upstream), mode],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._child.stdin is not None and self._child.stdout is not None
        self.port = int(self._child.stdout.readline())
        self._mode: Mode = mode

    @property
    def mode(self) -> Mode:
        return self._mode

    @mode.setter
    def mode(self, mode: Mode) -> None:
        assert self._child.stdin is not None and self._child.stdout is not None
        self._child.stdin.write(mode + "\n")
        self._child.stdin.flush()
        self._child.stdout.readline()  # applied
        self._mode = mode

    def __enter__(self) -> "ProxyProcess":
        return self

    def __exit__(self, *_exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self._child.kill()
        self._child.wait()


if __name__ == "__main__":
    # `python proxy.py UPSTREAM [MODE]`: prints the port, then takes one mode per line.
    import sys

    proxy = Proxy(int(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "forward")  # type: ignore[arg-type]
    print(proxy.port, flush=True)
    for line in sys.stdin:
        proxy.mode = line.strip()  # type: ignore[assignment]
        print("ok", flush=True)
