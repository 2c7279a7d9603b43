"""A TCP proxy between one node agent and Redis whose link the test can cut silently: packets are
neither answered nor refused, as when a switch drops them, so the agent's calls hang until their
socket timeout. Nothing is closed while cut; `heal()` forwards again what was held."""

from __future__ import annotations

import select
import socket
import threading


class LinkProxy:
    def __init__(self, target_port: int, host: str = "127.0.0.1"):
        self.target = (host, target_port)
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind((host, 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.up = threading.Event()
        self.up.set()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self) -> str:
        return f"redis://{self.target[0]}:{self.port}/0"

    def cut(self) -> None:
        self.up.clear()

    def heal(self) -> None:
        self.up.set()

    def close(self) -> None:
        self._closed = True
        self.up.set()
        self.listener.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        self.up.wait()  # a connection made while cut hangs, as a SYN into the void would
        try:
            far = socket.create_connection(self.target)
        except OSError:
            conn.close()
            return
        pair = {conn: far, far: conn}
        try:
            while not self._closed:
                ready, _, _ = select.select(list(pair), [], [], 0.2)
                for s in ready:
                    self.up.wait()  # while cut, bytes wait in the kernel buffers: nothing moves
                    data = s.recv(65536)
                    if not data:
                        return
                    pair[s].sendall(data)
        except OSError:
            pass
        finally:
            conn.close()
            far.close()
