"""The SuperLink's address, checked before Flower's client starts (which retries a bad one ~45 s)."""

from __future__ import annotations

import socket

from fedvote.errors import ConfigError


def check_superlink(address: str) -> None:
    """Refuse (naming ``--superlink``) an address Flower's client would retry for about 45 s in vain.

    ``address`` must be HOST:PORT (``[v6]:PORT`` for an IPv6 address), the port 1 to 65535 and the
    host a name that resolves. A host that resolves but does not answer yet is accepted: the
    SuperLink may start later, and Flower retries until it does. A temporary failure of name
    resolution (``EAI_AGAIN``) is left to Flower's retries too.
    """
    host, colon, port = address.strip().rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not colon or not host or not port.isdigit():
        example = f"127.0.0.1:{9093}"
        raise ConfigError("superlink", f"{address!r} is no HOST:PORT (e.g. {example})")
    if not 1 <= int(port) <= 65535:
        raise ConfigError("superlink", f"port {port} of {address} is no TCP port (1 to 65535)")
    try:
        socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
    except socket.gaierror as error:
        if error.errno == socket.EAI_AGAIN:
            return
        reason = error.strerror or str(error)
        raise ConfigError(
            "superlink", f"host {host!r} of {address} does not resolve ({reason}); give the SuperLink's "
            "host name or IP address"
        ) from None
    except UnicodeError:  # a label over 63 characters, or not IDNA
        raise ConfigError("superlink", f"host {host!r} of {address} is no valid host name") from None
