"""A torch.distributed rendezvous store that listens only where it is told to."""

from __future__ import annotations

import datetime

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def bound_store(init_method: str, world_size: int, rank: int, timeout: datetime.timedelta) -> object:
    """The rendezvous store of ``tcp://HOST:PORT``, listening on HOST only.

    torch's own TCPStore server listens on every interface; rank 0 binds the
    socket itself (loopback unless ``--dist-init-addr`` names another host)
    and hands it over. With a loopback host, gloo's peer sockets stay on the
    loopback interface too (``GLOO_SOCKET_IFNAME=lo`` unless set).
    """
    import errno
    import os
    import socket

    import torch.distributed as dist

    host, _, port = init_method.removeprefix("tcp://").rpartition(":")
    host = host.strip("[]")
    if host in LOOPBACK:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    if rank != 0:
        return dist.TCPStore(host, int(port), world_size, False, timeout)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, int(port)))
    except OSError as exc:
        # The launcher picks a free port seconds before this rank binds it, and another process (a second server
        # started beside this one) can take it meanwhile. A group of one rank has no peer that must find the
        # store, so it takes any free port of the host; a larger group cannot move without its peers.
        if exc.errno != errno.EADDRINUSE or world_size != 1:
            sock.close()
            raise
        sock.bind((host, 0))
    sock.listen(256)
    bound = sock.getsockname()[1]
    fd = sock.detach()  # the store owns the listening socket from here (Python must not close it)
    return dist.TCPStore(host, bound, world_size, True, timeout, master_listen_fd=fd)
