#!/usr/bin/env python3
"""Idle RSS of `ferry gateway` with and without a lot of long-term memory stored.

Usage: memory_idle_rss.py <ferry binary> [documents]

Two homes: one with no memory, one with `documents` memory documents of about 5 KB
(default 10,000: ~50 MB, 1,000 people with 10 notes each), put in with `ferry memory
import`. Each gateway starts (web chat only, keyword search), is left idle for 20 s, and
its VmRSS is read from /proc. Memory lives in the state store and is read per search, so
the two numbers should be the same within noise.
"""

import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

IDLE_SECONDS = 20
WORDS = [f"word{n}" for n in range(5000)]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def home_with(binary, documents):
    home = tempfile.mkdtemp(prefix="ferry-rss-")
    port = free_port()
    with open(os.path.join(home, "ferry.toml"), "w") as config:
        config.write(f'state_dir = "{home}/state"\n[gateway]\nport = {port}\n')
    if documents:
        rng = random.Random(7)
        source = os.path.join(home, "import", "main")
        for n in range(documents):
            scope = os.path.join(source, f"private:telegram:{n // 10}", "memory")
            os.makedirs(scope, exist_ok=True)
            text = "\n".join(" ".join(rng.choice(WORDS) for _ in range(20)) for _ in range(40))
            with open(os.path.join(scope, f"note-{n % 10}.md"), "w") as note:
                note.write(text + "\n")
        started = time.time()
        subprocess.run(
            [binary, "--config", f"{home}/ferry.toml", "memory", "import", os.path.join(home, "import")],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        print(f"imported {documents} documents in {time.time() - started:.1f} s")
    return home, port


def idle_rss(binary, home, port):
    env = {"HOME": home, "PATH": os.environ.get("PATH", ""), "RUST_LOG": "warn"}
    gateway = subprocess.Popen(
        [binary, "--config", f"{home}/ferry.toml", "gateway"], env=env, stdout=subprocess.DEVNULL
    )
    try:
        deadline = time.time() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as answer:
                    health = json.load(answer)
                    break
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.2)
        time.sleep(IDLE_SECONDS)
        with open(f"/proc/{gateway.pid}/status") as status:
            rss = next(line.split()[1] for line in status if line.startswith("VmRSS:"))
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as answer:
            health = json.load(answer)
        return int(rss) / 1024, health.get("memory", {})
    finally:
        gateway.terminate()
        gateway.wait()


def main():
    binary = sys.argv[1]
    documents = int(sys.argv[2]) if len(sys.argv) > 2 else 10_000
    for label, count in (("no memory", 0), (f"{documents} documents", documents)):
        home, port = home_with(binary, count)
        rss, memory = idle_rss(binary, home, port)
        stored = f"{memory.get('documents', 0)} documents, {memory.get('bytes', 0) / 1e6:.1f} MB"
        print(f"{label}: idle RSS {rss:.1f} MB ({stored} in {memory.get('scopes', 0)} scopes)")


if __name__ == "__main__":
    main()
