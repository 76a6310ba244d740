"""A bounded bulk TCP flow for the fleet lab's queueing fault:
`bulk.py sink ADDR SECONDS` reads and discards on ADDR:9999,
`bulk.py send ADDR SECONDS` writes as fast as TCP lets it. Both stop after
SECONDS, so no run leaves a flow behind."""

import socket
import sys
import time

role, addr, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
end = time.time() + seconds
if role == "sink":
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((addr, 9999))
    srv.listen(4)
    srv.settimeout(max(0.1, end - time.time()))
    try:
        conn, _ = srv.accept()
        conn.settimeout(1)
        while time.time() < end:
            try:
                if not conn.recv(1 << 16):
                    break
            except socket.timeout:
                pass
    except socket.timeout:
        pass
else:
    # The sink may not listen yet on a loaded machine: retry until the end.
    while True:
        try:
            s = socket.create_connection((addr, 9999), timeout=1)
            break
        except OSError:
            if time.time() > end:
                sys.exit("bulk: the sink never answered")
            time.sleep(0.05)
    s.settimeout(1)
    chunk = b"\0" * (1 << 16)
    while time.time() < end:
        try:
            s.send(chunk)
        except socket.timeout:
            pass
