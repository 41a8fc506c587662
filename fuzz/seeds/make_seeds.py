#!/usr/bin/env python3
"""Writes the seed corpora in fuzz/seeds/<target>/ (run from anywhere; rewrites them).

The payloads are the ones Ferry's tests use: the shapes tests/fakes sends (Telegram
updates, Discord gateway frames, Slack events and envelopes, OpenAI and Anthropic SSE
streams), the frames of tests/gateway.rs, config/default.toml and the README's config
examples, and markdown like the reply formatter's tests. Inputs libFuzzer found that
crashed a target are added by hand as regression-<what> (a fixed bug) or limit-<what> (a
documented limit, FUZZING.md); telegram_entities takes a structured input, so its seeds
(generated-*) are a few inputs from a fuzzing run. This script leaves all of those alone.
web_page's seeds are the pages tests/web_tools.rs and tests/conformance/web_fetch.rs serve and
the ones the converter's and the charset module's unit tests read.
"""

import json
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
SEEDS = pathlib.Path(__file__).resolve().parent


def write(target, name, data):
    directory = SEEDS / target
    directory.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    (directory / name).write_bytes(data)


def compact(value):
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


# ---- Telegram: updates as the webhook and getUpdates deliver them ----------------------------
alice = {"id": 42, "is_bot": False, "first_name": "Alice", "last_name": "Liddell", "username": "alice"}
private = {"id": 42, "type": "private", "first_name": "Alice"}
group = {"id": -100123, "type": "supergroup", "title": "Team"}
forum = {"id": -100777, "type": "supergroup", "title": "Forum", "is_forum": True}
bot = {"id": 999, "is_bot": True, "first_name": "Ferry", "username": "ferry_bot"}


def message(chat, **extra):
    body = {"message_id": 7, "date": 1_700_000_000, "chat": chat, "from": alice}
    body.update(extra)
    return body


def update(body, kind="message"):
    return compact({"update_id": 1, kind: body})


telegram = {
    "private_text": update(message(private, text="hello")),
    "group_mention": update(message(group, text="@ferry_bot hi", entities=[{"type": "mention", "offset": 0, "length": 10}])),
    "command_for_bot": update(message(group, text="/new@ferry_bot now", entities=[{"type": "bot_command", "offset": 0, "length": 14}])),
    "text_mention": update(message(group, text="Ferry, hi", entities=[{"type": "text_mention", "offset": 0, "length": 5, "user": bot}])),
    "entity_out_of_range": update(message(group, text="hi", entities=[{"type": "mention", "offset": 5, "length": 10}])),
    "entity_cuts_surrogate": update(message(group, text="😀@ferry_bot", entities=[{"type": "mention", "offset": 1, "length": 11}])),
    "forum_topic_reply": update(message(forum, text="in topic", is_topic_message=True, message_thread_id=55,
                                        reply_to_message=message(forum, message_id=55, forum_topic_created={"name": "T", "icon_color": 7322096}))),
    "reply_to_bot": update(message(group, text="yes", reply_to_message=message(group, message_id=6, text="question?", **{"from": bot}))),
    "photo_caption": update(message(private, caption="look", photo=[{"file_id": "p1", "file_unique_id": "u1", "width": 90, "height": 90, "file_size": 1000},
                                                                     {"file_id": "p2", "file_unique_id": "u2", "width": 800, "height": 800}])),
    "document": update(message(private, document={"file_id": "d", "file_unique_id": "du", "file_name": "a.pdf", "mime_type": "application/pdf", "file_size": 5})),
    "voice": update(message(private, voice={"file_id": "v", "file_unique_id": "vu", "duration": 3, "mime_type": "audio/ogg"})),
    "edited": update(message(private, text="edit", edit_date=1_700_000_100), "edited_message"),
    "channel_post": update(message({"id": -1009, "type": "channel", "title": "News"}, text="post"), "channel_post"),
    "service_join": update(message(group, new_chat_members=[alice])),
    "sticker_only": update(message(private, sticker={"file_id": "s", "file_unique_id": "su", "type": "regular", "width": 1, "height": 1, "is_animated": False, "is_video": False})),
}
for name, body in telegram.items():
    write("telegram_update", name, body)

# ---- Discord: gateway frames as the fake gateway sends them; channel objects -----------------
user = {"id": "42", "username": "alice", "global_name": "alice", "discriminator": "0", "avatar": None, "bot": False}
discord_bot = {"id": "999", "username": "ferry", "global_name": "ferry", "discriminator": "0", "avatar": None, "bot": True}


def discord_message(content, guild=True, kind=0, **extra):
    body = {
        "id": "1001", "channel_id": "900", "author": user, "content": content,
        "timestamp": "2026-01-02T03:04:05.000000+00:00", "edited_timestamp": None, "tts": False,
        "mention_everyone": False, "mentions": [], "mention_roles": [], "attachments": [], "embeds": [],
        "pinned": False, "type": kind,
    }
    if guild:
        body["guild_id"] = "1"
    body.update(extra)
    return body


def dispatch(event, data, seq=1):
    return compact({"op": 0, "t": event, "s": seq, "d": data})


discord = {
    "hello": compact({"op": 10, "d": {"heartbeat_interval": 41250}}),
    "heartbeat_ack": compact({"op": 11}),
    "invalid_session": compact({"op": 9, "d": False}),
    "ready": dispatch("READY", {"v": 10, "user": discord_bot, "guilds": [], "session_id": "s1",
                                "resume_gateway_url": "ws://127.0.0.1:1", "shard": [0, 1],
                                "application": {"id": "999", "flags": 0}}),
    "message_dm": dispatch("MESSAGE_CREATE", discord_message("hello", guild=False)),
    "message_mention": dispatch("MESSAGE_CREATE", discord_message("<@999> hi <@!999>", mentions=[discord_bot])),
    "message_only_mention": dispatch("MESSAGE_CREATE", discord_message("<@999>", mentions=[discord_bot])),
    "message_reply": dispatch("MESSAGE_CREATE", discord_message(
        "sure", kind=19, message_reference={"message_id": "1000", "channel_id": "900"},
        referenced_message=discord_message("question?", id="1000", author=discord_bot))),
    "message_attachment": dispatch("MESSAGE_CREATE", discord_message("", attachments=[
        {"id": "5", "filename": "a.png", "size": 10, "url": "https://cdn.example/a.png",
         "proxy_url": "https://cdn.example/a.png", "content_type": "image/png"}])),
    "message_own": dispatch("MESSAGE_CREATE", discord_message("mine", author=discord_bot)),
    "message_system": dispatch("MESSAGE_CREATE", discord_message("", kind=7)),
    "resumed": dispatch("RESUMED", {}),
    "channel_thread": compact({"id": "900", "type": 11, "guild_id": "1", "parent_id": "800", "name": "channel-900"}),
    "channel_dm": compact({"id": "900", "type": 1, "name": "channel-900"}),
}
for name, body in discord.items():
    write("discord_gateway", name, body)

# ---- Slack: Events API bodies and Socket Mode envelopes as the fake Slack sends them -------
def slack_callback(event, event_id="Ev1"):
    event.setdefault("ts", "1700000000.000100")
    event.setdefault("event_ts", event["ts"])
    return {"token": "legacy-verification-token", "team_id": "T1", "api_app_id": "A1",
            "type": "event_callback", "event_id": event_id, "event_time": 1700000000,
            "authorizations": [{"team_id": "T1", "user_id": "UBOT", "is_bot": True}], "event": event}


def slack_message(channel, channel_type, text, **extra):
    body = {"type": "message", "channel": channel, "channel_type": channel_type, "user": "U42", "text": text,
            "client_msg_id": "msg-1"}
    body.update(extra)
    return body


slack_events = {
    "dm": slack_message("DU42", "im", "hello"),
    "channel_mention": slack_message("C1", "channel", "<@UBOT> hi"),
    "thread_reply": slack_message("C1", "channel", "in thread", thread_ts="1699999999.000100"),
    "private_channel": slack_message("G1", "group", "<@UBOT|ferry> there"),
    "app_mention": {"type": "app_mention", "channel": "G7", "user": "U42", "text": "<@UBOT> hi"},
    "bot_own": {"type": "message", "channel": "C1", "channel_type": "channel", "bot_id": "BBOT", "text": "mine", "subtype": "bot_message"},
    "edit": {"type": "message", "channel": "C1", "subtype": "message_changed", "hidden": True,
             "message": {"type": "message", "user": "U42", "text": "new", "ts": "1.1"}, "previous_message": {"type": "message", "text": "old", "ts": "1.1"}},
    "file_share": slack_message("DU42", "im", "", subtype="file_share", files=[
        {"id": "F1", "name": "a.png", "mimetype": "image/png", "url_private": "https://files.example/a.png"}]),
}
for name, event in slack_events.items():
    callback = slack_callback(event)
    write("slack_events", "events_api_" + name, compact(callback))
    write("slack_events", "socket_" + name, compact({"envelope_id": "env-1", "type": "events_api", "accepts_response_payload": False,
                                                    "retry_attempt": 0, "retry_reason": "", "payload": callback}))
write("slack_events", "url_verification", compact({"token": "t", "challenge": "abc", "type": "url_verification"}))
write("slack_events", "socket_hello", compact({"type": "hello", "num_connections": 1,
                                               "debug_info": {"host": "fake-slack", "approximate_connection_time": 3600},
                                               "connection_info": {"app_id": "A1"}}))
write("slack_events", "socket_disconnect", compact({"type": "disconnect", "reason": "refresh_requested", "debug_info": {"host": "fake-slack"}}))

# ---- SSE: OpenAI and Anthropic streams as the fake model servers send them ------------------
# The first byte chooses how the body is cut into network chunks.
def openai_chunk(delta, finish=None, usage=None, with_usage=False):
    chunk = {"id": "chatcmpl-fake1", "object": "chat.completion.chunk", "created": 1700000000, "model": "gpt-fake",
             "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}] if delta is not None else []}
    if with_usage:
        chunk["usage"] = usage
    return "data: " + compact(chunk) + "\n\n"


openai_text = "".join([
    openai_chunk({"role": "assistant", "content": ""}, with_usage=True),
    openai_chunk({"reasoning_content": "Thinking…"}, with_usage=True),
    openai_chunk({"content": "Hello"}, with_usage=True),
    openai_chunk({"content": ", wörld 😀"}, with_usage=True),
    openai_chunk({}, finish="stop", with_usage=True),
    openai_chunk(None, usage={"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}, with_usage=True),
    "data: [DONE]\n\n",
])
openai_tools = "".join([
    openai_chunk({"role": "assistant", "content": ""}),
    openai_chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": ""}}]}),
    openai_chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{\"path\":"}}]}),
    openai_chunk({"tool_calls": [{"index": 0, "function": {"arguments": "\"a.txt\"}"}}]}),
    openai_chunk({}, finish="tool_calls"),
    "data: [DONE]\n\n",
])
openai_error = ": keep-alive\r\n\r\ndata: " + compact({"error": {"message": "maximum context length exceeded", "type": "invalid_request_error", "code": "context_length_exceeded"}}) + "\r\n\r\n"


def anthropic_event(name, data):
    return "event: " + name + "\ndata: " + compact(data) + "\n\n"


anthropic_text = "".join([
    anthropic_event("message_start", {"type": "message_start", "message": {"id": "msg_fake1", "type": "message", "role": "assistant", "model": "claude-fake", "content": [],
                                                                             "stop_reason": None, "stop_sequence": None,
                                                                             "usage": {"input_tokens": 12, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 1}}}),
    anthropic_event("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}),
    anthropic_event("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Hmm"}}),
    anthropic_event("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "fake-signature-1"}}),
    anthropic_event("content_block_stop", {"type": "content_block_stop", "index": 0}),
    anthropic_event("content_block_start", {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}),
    anthropic_event("ping", {"type": "ping"}),
    anthropic_event("content_block_delta", {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Hello, wörld 😀"}}),
    anthropic_event("content_block_stop", {"type": "content_block_stop", "index": 1}),
    anthropic_event("content_block_start", {"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {}}}),
    anthropic_event("content_block_delta", {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "{\"path\":\"a.txt\"}"}}),
    anthropic_event("content_block_stop", {"type": "content_block_stop", "index": 2}),
    anthropic_event("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None}, "usage": {"output_tokens": 9}}),
    anthropic_event("message_stop", {"type": "message_stop"}),
])
anthropic_error = anthropic_event("message_start", {"type": "message_start", "message": {"usage": {"input_tokens": 1}}}) + \
    anthropic_event("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
for name, body in {"openai_text": openai_text, "openai_tools": openai_tools, "openai_error": openai_error,
                   "anthropic_text": anthropic_text, "anthropic_error": anthropic_error,
                   "anthropic_cut": anthropic_text[: len(anthropic_text) // 2]}.items():
    for seed in (0x00, 0x37):
        write("sse_decoders", f"{name}_{seed:02x}", bytes([seed]) + body.encode())

# ---- Gateway: WebSocket RPC frames as tests/gateway.rs sends them --------------------------
frames = {
    "connect": {"type": "req", "id": "c1", "method": "connect",
                "params": {"auth": {"token": "secret"}, "client": {"id": "web-1", "version": "1.0"}}},
    "chat_send": {"type": "req", "id": 2, "method": "chat.send", "params": {"message": "hi", "idempotencyKey": "k1"}},
    "agent": {"type": "req", "id": "3", "method": "agent",
              "params": {"message": "hi", "idempotencyKey": "k2", "sessionKey": "agent:main:web:direct:x", "timeout": 30,
                         "deliver": True, "channel": "telegram", "to": "42"}},
    "history": {"type": "req", "id": 4, "method": "chat.history", "params": {"limit": 20}},
    "health": {"type": "req", "id": "h", "method": "health"},
    "wrong_type": {"type": "res", "id": 7, "method": "x"},
    "bad_id": {"type": "req", "id": {"a": 1}, "method": "health"},
    "unknown_field": {"type": "req", "id": 1, "method": "health", "extra": True},
}
for name, frame in frames.items():
    write("gateway_frame", name, compact(frame))
write("gateway_frame", "not_json", "{not json")

# ---- Config: the shipped defaults and the README's examples ---------------------------------
write("config_load", "default.toml", (ROOT / "config" / "default.toml").read_bytes())
readme = (ROOT / "README.md").read_text()
blocks = readme.split("```toml\n")[1:]
for index, block in enumerate(blocks):
    write("config_load", f"readme_{index:02d}.toml", block.split("```")[0])
write("config_load", "syntax_error.toml", "[gateway]\nport = \n")
write("config_load", "duplicate_key.toml", "[gateway]\nport = 1\nport = 2\n")
write("config_load", "huge_integer.toml", "[gateway]\nport = 99999999999999999999\n")
write("config_load", "unknown_key.toml", "[gatway]\nport = 8080\n")
write("config_load", "postgres_state.toml",
      "[state]\nbackend = \"postgres\"\npostgres_url = \"postgres://ferry:pw@db:5432/ferry?sslmode=require\"\n"
      "pool_size = 4\nlease_seconds = 9\nrenew_seconds = 3\n")

# ---- Reply formatting and block chunking ----------------------------------------------------
replies = {
    "mixed": "# Heading\n\n**Done** — see `x < y` & [a link](https://example.com/a?b=1&c=2)\n\n- item\n- **item** two\n  - nested\n\n> quoted *text*\n",
    "code": "Here:\n\n```rust\nfn main() {\n    println!(\"<hi> & bye\");\n}\n```\n\nAnd ~~gone~~ text with 😀 and 日本語.",
    "table": "| a | b |\n|---|--:|\n| 1 | 22 |\n| <script> | AT&T |\n",
    "slack_mentions": "Hey <@U123> and <!here>: 1. first\n2. second\n- [ ] task\n- [x] done",
    "long_word": "averyveryveryverylongwordwithoutanybreaksatallinsideitwhatsoeverreally " * 20,
    "long_code": "```python\n" + "".join(f"print({i})  # line {i}\n" for i in range(60)) + "```\n",
}
headers = {"format_split": [bytes([d, 0x64, 0x00, 0x00]) for d in range(5)] + [bytes([3, 0x10, 0x01, 40])],
           "chunker": [bytes([0x3C, 0x00, 0x80, 0, 5, 13]), bytes([0xC8, 0x00, 0x00, 1, 0, 33]), bytes([0x28, 0x00, 0xFF, 2, 1, 1])]}
for target, prefixes in headers.items():
    for name, text in replies.items():
        for index, prefix in enumerate(prefixes):
            write(target, f"{name}_{index}", prefix + text.encode())

# ---- Web pages: what web_fetch reads, after a byte picking the Content-Type ------------------
# The selector indexes CONTENT_TYPES in fuzz_targets/web_page.rs: 0 none, 1 text/html,
# 2 utf-8, 3 windows-1252, 4 Shift_JIS, 5 gb18030, 6 utf-16le, 7 an unknown label.
sjis = "日本語のページ".encode("shift_jis")
pages = {
    "test_page": (2, """<!doctype html>
<html><head><title>Ferry test page</title><script>var tracking = 1;</script></head>
<body><nav><a href="/">Home</a></nav>
<h1>Welcome aboard</h1>
<p>This page has <a href="/docs/setup">a setup guide</a> and <em>emphasis</em>.</p>
<h2>Details</h2><ul><li>first</li><li>second</li></ul>
</body></html>"""),
    "harbour_notes": (2, "<!doctype html><html><head><title>Harbour notes</title>"
                         "<script>var tracking = 'pixel';</script></head><body><h1>Tides today</h1>"
                         "<p>High water at <strong>14:05</strong>; see <a href=\"/tables\">the tide tables</a>.</p></body></html>"),
    "docs": (1, "<html><head><title> Ferry \n docs </title><style>h1{color:red}</style></head><body>"
                "<h1>Getting started</h1><p>Read <a href=\"guide.html\">the guide</a> and "
                "<strong>run</strong> it.</p><ul><li>one</li><li>two</li></ul>"
                "<h2>Code</h2><pre><code>cargo run</code></pre></body></html>"),
    "links": (0, "<head><base href=\"https://cdn.example.org/v2/\"></head><a href=\"/root\">root</a> "
                 "<a href=\"#top\">top</a> <a href=\"javascript:void(0)\">js</a> "
                 "<img src=\"data:image/png;base64,AAAA\" alt=\"pixel\"> <img src=\"pic.png\" alt=\"pic\">"),
    "controls": (1, "<p>kept</p><script>alert('gone')</script><noscript>enable js</noscript>"
                    "<form><input value=\"x\"><button>Click</button><select><option>opt</option></select></form>"
                    "<svg><text>drawn</text></svg>"),
    "nested_tables": (1, "<table><tr><td>" * 40 + "<b>bottom</b>" + "</td></tr></table>" * 40),
    # Each table is four levels (table, tbody, tr, td) and counts once against the parser's bound
    # (200), so 140 of them pass the converter's MAX_DEPTH (512): the part below is flattened.
    "tables_past_max_depth": (1, "<table><tr><td>" * 140 + "<b>bottom</b>"),
    "table": (2, "<table><thead><tr><th>a</th><th>b|c</th></tr></thead><tbody><tr><td>1</td><td>`x`</td></tr></tbody></table>"),
    "windows_1252_header": (3, b"<p>\x93quoted\x94 Caf\xe9 \x80</p>"),
    "shift_jis_meta": (1, b"<!doctype html><html><head><meta charset=\"Shift_JIS\"></head><body><p>" + sjis + b"</p></body></html>"),
    "shift_jis_http_equiv": (0, b"<html><head><meta http-equiv=\"Content-Type\" content=\"text/html; charset=shift_jis\"></head><p>" + sjis),
    "header_over_meta": (3, b"<head><meta charset=shift_jis></head><p>\x93\xfa\x96{</p>"),
    "meta_in_comment": (1, b"<!-- <meta charset=shift_jis> --><div title=\"<meta charset=sjis>\">" + sjis),
    "utf8_bom": (4, b"\xef\xbb\xbf<p>caf\xc3\xa9</p>"),
    "utf16_bom": (6, b"\xff\xfe" + "<p>hé</p>".encode("utf-16-le")),
}
for name, (selector, page) in pages.items():
    if isinstance(page, str):
        page = page.encode()
    write("web_page", name, bytes([selector]) + page)


# ---- user_file: a size knob, then a file as users send them ----------------------------------
import struct
import zlib


def png(width, height, color_type, pixel):
    """A PNG of one colour: colour type 2 (RGB) or 6 (RGBA), 8 bits."""
    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)
    rows = b"".join(b"\x00" + pixel * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, color_type, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


GIF_1X1 = bytes.fromhex("47494638396101000100800000000000ffffff21f90401000000002c00000000010001000002024401003b")
for knob, name, data in [
    (0, "png_rgb_300x200", png(300, 200, 2, b"\x10\x80\xf0")),
    (40, "png_rgba_64x500", png(64, 500, 6, b"\x10\x80\xf0\x80")),
    (255, "png_opaque_alpha_40x40", png(40, 40, 6, b"\x01\x02\x03\xff")),
    (7, "gif_1x1", GIF_1X1),
    (3, "text", "# Notes\nmilk, eggs\n".encode()),
    (3, "elf", b"\x7fELF\x02\x01\x01\x00" + bytes(56)),
    (9, "pdf_header", b"%PDF-1.4\n1 0 obj\n<<>>\nendobj\n"),
]:
    write("user_file", name, bytes([knob]) + data)

# ---- media_lines: replies that attach files ---------------------------------------------------
for name, text in [
    ("one_line", "Here is the chart.\nMEDIA: out/chart.png\n"),
    ("url", "MEDIA: https://example.com/a.pdf\nThat is the report."),
    ("fenced", "Write it like this:\n```\nMEDIA: path/to/file.png\n```\n"),
    ("indented_and_empty", "  MEDIA:a.png\nMEDIA:   \nMED"),
    ("partial", "Done.\nMEDIA: out/ch"),
]:
    write("media_lines", name, text)
