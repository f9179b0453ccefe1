#!/usr/bin/env python3
"""A TLS-terminating proxy for georelay's tests (standard library only).

Usage: tls_proxy.py CERT KEY TARGET_PORT
Listens on an ephemeral port on 127.0.0.1, prints that port on one line, then
forwards each TLS connection, decrypted, to 127.0.0.1:TARGET_PORT (a fake server).
Runs until killed.
"""
import os
import select
import socket
import ssl
import sys
import threading
import time


def serve(raw, context, target_port):
    """One connection, on one thread: an SSL socket must not be read and written from two."""
    try:
        client = context.wrap_socket(raw, server_side=True)
    except (ssl.SSLError, OSError):
        # A client that refuses our certificate: exactly what the tests expect of georelay.
        raw.close()
        return
    try:
        upstream = socket.create_connection(("127.0.0.1", target_port))
    except OSError:
        client.close()
        return
    try:
        while True:
            # Bytes TLS has already decrypted do not show up in select().
            readable = [client] if client.pending() else select.select([client, upstream], [], [])[0]
            for source in readable:
                data = source.recv(65536)
                if not data:
                    return
                (upstream if source is client else client).sendall(data)
    except OSError:
        pass
    finally:
        client.close()
        upstream.close()


def exit_with_parent():
    """The test that started us may crash or be killed: never outlive it."""
    parent = os.getppid()
    while os.getppid() == parent:
        time.sleep(0.2)
    os._exit(0)


def main():
    cert, key, target_port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    threading.Thread(target=exit_with_parent, daemon=True).start()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    print(listener.getsockname()[1], flush=True)
    while True:
        raw, _ = listener.accept()
        threading.Thread(target=serve, args=(raw, context, target_port), daemon=True).start()


if __name__ == "__main__":
    main()
