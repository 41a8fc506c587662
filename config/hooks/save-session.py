#!/usr/bin/env python3
"""Ferry internal hook for "command:new" / "command:reset": saves the last messages of the
conversation that is ending to a Markdown file in the agent workspace, and tells the user.

ferry.toml:

    [hooks.internal."command:new"]
    path = "/usr/bin/env"
    args = ["python3", "/etc/ferry/hooks/save-session.py"]

Input (stdin): the event as JSON, e.g. {"event": "command:new", "session_key": "...",
"session_id": "...", "workspace": "/var/lib/ferry/workspace", "messages": [{"role": "user",
"text": "..."}, ...]}.
Output (stdout): {"replies": ["..."]}, each line sent to the user.
"""

import json
import os
import re
import sys
from datetime import datetime, timezone


def main() -> int:
    event = json.load(sys.stdin)
    messages = event.get("messages") or []
    if not messages:
        return 0  # Nothing to keep; print nothing, the user gets no extra line.
    folder = os.path.join(event["workspace"], "sessions")
    os.makedirs(folder, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H-%M-%SZ")
    session = re.sub(r"[^A-Za-z0-9_-]+", "_", event.get("session_id") or "session")
    path = os.path.join(folder, f"{stamp}-{session}.md")
    with open(path, "w", encoding="utf-8") as out:
        out.write(f"# Conversation {event.get('session_key', '')}\n\n")
        out.write(f"Saved {stamp} on {event['event']}.\n\n")
        for message in messages:
            out.write(f"**{message['role']}**: {message['text']}\n\n")
    relative = os.path.relpath(path, event["workspace"])
    print(json.dumps({"replies": [f"📝 Saved the last {len(messages)} messages to {relative}."]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
