"""Sends 30 MB bodies to a running gateway (10 WebSocket frames and 9 HTTP POSTs a round) and
prints its RSS before, at its peak and after. Usage: oversized_bodies.py PORT PID [ROUNDS].
See BENCHMARKS.md, "Oversized bodies"."""
import base64, os, socket, sys, threading, time, http.client

PORT = int(sys.argv[1]); PID = int(sys.argv[2]); ROUNDS = int(sys.argv[3]) if len(sys.argv) > 3 else 3
BODY = 30 * 1024 * 1024

def rss():
    with open(f"/proc/{PID}/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) // 1024

def ws_big():
    s = socket.create_connection(("127.0.0.1", PORT))
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall((f"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    s.recv(4096)
    mask = os.urandom(4)
    header = bytes([0x81, 0x80 | 127]) + BODY.to_bytes(8, "big") + mask
    try:
        s.sendall(header)
        chunk = b"x" * 65536
        sent = 0
        while sent < BODY:
            s.sendall(chunk); sent += len(chunk)
    except OSError:
        pass
    try:
        data = s.recv(64)
        code = int.from_bytes(data[2:4], "big") if len(data) >= 4 and data[0] == 0x88 else None
    except OSError:
        code = "reset"
    s.close()
    return code

def post_big(path):
    c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=30)
    try:
        c.putrequest("POST", path); c.putheader("Content-Length", str(BODY))
        c.putheader("X-Telegram-Bot-Api-Secret-Token", "nope"); c.putheader("Content-Type", "application/json")
        c.endheaders()
        chunk = b"x" * 65536; sent = 0
        while sent < BODY:
            c.send(chunk); sent += len(chunk)
        return c.getresponse().status
    except OSError as e:
        return f"closed ({type(e).__name__})"

print("idle RSS MB", rss())
peak = 0
for r in range(ROUNDS):
    results = []
    threads = [threading.Thread(target=lambda: results.append(("ws", ws_big()))) for _ in range(10)]
    threads += [threading.Thread(target=lambda p=p: results.append((p, post_big(p)))) for p in ["/slack/events", "/telegram/webhook", "/healthz"] for _ in range(3)]
    for t in threads: t.start()
    while any(t.is_alive() for t in threads):
        peak = max(peak, rss()); time.sleep(0.05)
    print("round", r, sorted(set(map(str, results))), "peak so far MB", peak)
time.sleep(5)
print("after 5 s RSS MB", rss())
