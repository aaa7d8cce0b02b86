#!/usr/bin/env python3
"""Fake model server for the end-to-end harness tests (stdlib only, binds 127.0.0.1).

The project's own copy of the brief's lab server (tests never depend on the brief at run time).

Imitates just enough of four wire protocols to let real agent CLIs complete a turn:
  * Anthropic Messages API     POST /v1/messages            (JSON or SSE when body.stream)
                               POST /v1/messages/count_tokens
  * OpenAI Chat Completions    POST /v1/chat/completions     (JSON or SSE when body.stream)
  * OpenAI Responses API       POST /v1/responses            (JSON or SSE when body.stream)
  * Gemini API                 POST /v1beta/models/M:generateContent | :streamGenerateContent (SSE)
  * GET /v1/models, anything else -> small JSON
Every request (method, path, headers subset, parsed body) is appended as one JSON line to
--log (default ./requests.jsonl), so a test can grep the body for a hook's marker string.

Usage: python3 fake_model_server.py --port 0 --port-file port.txt --pid-file pid.txt --log req.jsonl
       [--reply TEXT] [--input-tokens N] [--tokens-once-file F]
  --port 0            pick a free port; it is written to --port-file
  --pid-file          the server's own PID (pyenv shims make `$!` point at a wrapper, not python)
  --input-tokens N    usage reported on every reply (large N => client thinks context is full)
  --tokens-once-file  if F exists when a request arrives, its integer is reported as usage for that
                      one request and F is deleted: a one-shot auto-compaction trigger that does
                      not loop (a constant huge N makes OpenCode compact after every reply).
Replies: "<summary>FAKE-SUMMARY ...</summary>" when the tail of the conversation looks like a
summarisation/compaction prompt, else --reply. Gemini API: `FAKE_READ <path>` in the last user
turn (no function response after it) is answered with one `read_file` call for that path.
Anthropic: a user prompt containing
`FAKE_READ <absolute path>` (and no tool result yet) is answered with one `Read` tool call for
that path (`FAKE_READS <path>,<path>,...`: one `Read` call per path in one reply, which Claude
runs in parallel), so tests can drive a harness's PostToolUse hook (Chat Completions, streamed: one
`read` tool call with `{"path": ...}`, Pi's read tool; `read_file` with `{"file_path": ...}` when
the request offers that tool and no `read`: Qwen Code's). Chat Completions only (streamed): a
user prompt containing `FAKE_BASH <command>` (and no tool result after it) is answered with one
`bash` tool call running that command (Cline's `run_commands` when the request offers that tool
and no `bash`), so a turn makes a second model request after it (a
prompt OpenCode's `run` wrapped in quotes, as it does every argument holding a space, is
unwrapped first). Responses API and Gemini API: a user prompt containing `FAKE_TOOL <name>` (and
no tool result after it) is answered with one call of that tool, no arguments (Responses: a
`<namespace>.<name>` is called as `name` in that namespace, as Codex lists an MCP server's
tools), so a test can see an MCP tool's result in the next request.
"""
import argparse
import itertools
import json
import os
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ARGS = None
_IDS = itertools.count(1)
"""Reply ids (Anthropic messages): distinct per reply."""
LOCK = threading.Lock()
COUNTER = [0]


def log_request(handler, body_raw):
    try:
        body = json.loads(body_raw) if body_raw else None
    except Exception:
        body = body_raw.decode("utf-8", "replace")
    rec = {
        "t": time.time(),
        "method": handler.command,
        "path": handler.path,
        "headers": {k: v for k, v in handler.headers.items()
                    if k.lower() in ("user-agent", "content-type", "anthropic-version",
                                     "anthropic-beta", "x-app", "accept", "originator")},
        "body": body,
    }
    with LOCK:
        COUNTER[0] += 1
        with open(ARGS.log, "a") as f:
            f.write(json.dumps(rec) + "\n")
    return body if isinstance(body, dict) else {}


def input_tokens():
    """Usage to report: one-shot override from --tokens-once-file, else --input-tokens."""
    f = ARGS.tokens_once_file
    if f:
        with LOCK:
            try:
                with open(f) as fh:
                    n = int(fh.read().strip() or 0)
                os.unlink(f)
                return n
            except FileNotFoundError:
                pass
    return ARGS.input_tokens


def reply_text(body):
    """Compaction/summary prompts get a <summary> reply; everything else the plain reply."""
    s = json.dumps(body.get("messages") or body.get("input") or "")[-3000:].lower()
    if "summary" in s and ("compact" in s or "summarize" in s or "handoff" in s or "checkpoint" in s):
        return "<summary>FAKE-SUMMARY of the conversation so far.</summary>"
    return ARGS.reply


def wanted_read(body):
    """The path of a `FAKE_READ <path>` request in the last user turn, unless that turn
    already carries a tool result (the read happened)."""
    # Claude Code appends role "system" messages (hook context, agent lists) after the turn.
    messages = [m for m in body.get("messages") or [] if m.get("role") != "system"]
    if not messages or messages[-1].get("role") != "user":
        return None
    content = messages[-1].get("content")
    blocks = content if isinstance(content, list) else [{"type": "text", "text": content or ""}]
    if any(isinstance(b, dict) and b.get("type") == "tool_result" for b in blocks):
        return None
    for b in blocks:
        if isinstance(b, dict) and b.get("type") == "text":
            m = re.search(r"FAKE_READS? (\S+)", b.get("text") or "")
            if m:
                return m.group(1)
    return None


def wanted_bash(body, marker="FAKE_BASH"):
    """The command of a `FAKE_BASH <command>` request (to the end of its line) in the last user
    turn of a Chat Completions body, unless a tool result follows it (the command ran);
    ``marker`` "FAKE_READ": the path of a read asked that way."""
    messages = body.get("messages") or []
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=None)
    if last_user is None or any(m.get("role") == "tool" for m in messages[last_user:]):
        return None
    # the turn's user messages: Pi's extension appends its own after the prompt
    first = last_user
    while first > 0 and messages[first - 1].get("role") == "user":
        first -= 1
    parts = []
    for message in messages[first:last_user + 1]:
        content = message.get("content")
        parts += content if isinstance(content, list) else [{"type": "text", "text": content or ""}]
    for part in parts:
        if isinstance(part, dict) and part.get("type") == "text":
            text = part.get("text") or ""
            # `opencode run "a b"` sends the argument quoted ("a b", inner quotes \-escaped):
            # the command must not end in that closing quote (`sleep 4"` fails at once)
            if len(text) >= 2 and text[0] == text[-1] == '"':
                text = text[1:-1].replace('\\"', '"')
            m = re.search(marker + r" ([^\n]+)", text)
            if m:
                return m.group(1).strip()
    return None


def wanted_gemini_read(body):
    """The path of a `FAKE_READ <path>` request in the last user turn of a Gemini API body,
    unless a function response follows it (the read happened)."""
    contents = body.get("contents") or []
    users = [i for i, c in enumerate(contents) if c.get("role") == "user"
             and not any("functionResponse" in p for p in c.get("parts") or [])]
    if not users or any("functionResponse" in p for c in contents[users[-1]:]
                        for p in c.get("parts") or []):
        return None
    for part in contents[users[-1]].get("parts") or []:
        m = re.search(r"FAKE_READ (\S+)", part.get("text") or "")
        if m:
            return m.group(1)
    return None


def wanted_tool(turns, is_user, is_result, texts):
    """The tool name of a `FAKE_TOOL <name>` request in the last user turn of ``turns``, unless
    a tool result follows it; the wire's shape is given by the three callables."""
    last_user = max((i for i, t in enumerate(turns) if is_user(t)), default=None)
    if last_user is None or any(is_result(t) for t in turns[last_user:]):
        return None
    for text in texts(turns[last_user]):
        m = re.search(r"FAKE_TOOL (\S+)", text or "")
        if m:
            return m.group(1)
    return None


def responses_tool(body):
    """``wanted_tool`` of a Responses API body (``input`` items)."""
    items = body.get("input") if isinstance(body.get("input"), list) else []

    def texts(item):
        content = item.get("content")
        if isinstance(content, str):
            return [content]
        return [c.get("text") for c in content or [] if isinstance(c, dict)]

    return wanted_tool(items, lambda i: i.get("role") == "user" and i.get("type", "message") == "message",
                       lambda i: i.get("type") == "function_call_output", texts)


def gemini_tool(body):
    """``wanted_tool`` of a Gemini API body (``contents``)."""
    contents = body.get("contents") or []
    return wanted_tool(
        contents,
        lambda c: c.get("role") == "user" and any("text" in p for p in c.get("parts") or []),
        lambda c: any("functionResponse" in p for p in c.get("parts") or []),
        lambda c: [p.get("text") for p in c.get("parts") or []])


class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *a):  # quiet
        if ARGS.verbose:
            sys.stderr.write("[fake] " + fmt % a + "\n")

    def _read(self):
        n = int(self.headers.get("content-length") or 0)
        return self.rfile.read(n) if n else b""

    def _json(self, obj, code=200):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _sse_start(self):
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True

    def _ev(self, event, data):
        chunk = ""
        if event:
            chunk += f"event: {event}\n"
        chunk += "data: " + (data if isinstance(data, str) else json.dumps(data)) + "\n\n"
        self.wfile.write(chunk.encode())
        self.wfile.flush()

    def do_HEAD(self):
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def do_GET(self):
        log_request(self, b"")
        if self.path.startswith("/v1/models") or self.path.startswith("/models"):
            return self._json({"object": "list", "data": [
                {"id": ARGS.model, "object": "model", "created": 0, "owned_by": "fake",
                 "type": "model", "display_name": ARGS.model}]})
        return self._json({"ok": True})

    def do_POST(self):
        body = log_request(self, self._read())
        p = self.path.split("?")[0]
        if p.endswith("/messages/count_tokens"):
            return self._json({"input_tokens": 42})
        if p.endswith("/messages"):
            return self.anthropic(body)
        if p.endswith("/chat/completions"):
            return self.chat(body)
        if p.endswith("/responses"):
            return self.openai_responses(body)
        if ":generateContent" in p or ":streamGenerateContent" in p:
            return self.gemini(body, stream=":streamGenerateContent" in p)
        if p.endswith(":countTokens"):
            return self._json({"totalTokens": 42})
        return self._json({"ok": True})

    # ---- Anthropic Messages -------------------------------------------------------
    def anthropic(self, body):
        read = wanted_read(body)
        if read is not None and "," in read:  # FAKE_READS a,b,c: parallel Read tool calls
            blocks = [{"type": "tool_use", "id": f"toolu_fake{abs(hash(path)) % 10**8}",
                       "name": "Read", "input": {"file_path": path}} for path in read.split(",")]
            return self.anthropic_reply(body, blocks[0], {**blocks[0], "input": {}},
                                        {"type": "input_json_delta",
                                         "partial_json": json.dumps(blocks[0]["input"])},
                                        "tool_use", more=blocks[1:])
        if read is not None:  # one Read tool call, so a harness's PostToolUse hook fires
            block = {"type": "tool_use", "id": f"toolu_fake{abs(hash(read)) % 10**8}",
                     "name": "Read", "input": {"file_path": read}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
            return self.anthropic_reply(body, block, {**block, "input": {}}, delta, "tool_use")
        text = reply_text(body)
        return self.anthropic_reply(body, {"type": "text", "text": text},
                                    {"type": "text", "text": ""},
                                    {"type": "text_delta", "text": text}, "end_turn")

    def anthropic_reply(self, body, block, start_block, delta, stop, more=()):
        """One assistant message holding ``block`` (and the tool_use blocks ``more``): JSON,
        or SSE (start, one delta, stop per block)."""
        model = body.get("model", ARGS.model)
        usage = {"input_tokens": input_tokens(), "output_tokens": 5,
                 "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
        # a distinct id per reply: Claude groups a live session's messages by it (compaction
        # of one long-lived process failed with "too_few_groups" when every reply shared one)
        msg_id = f"msg_fake_{next(_IDS)}"
        if not body.get("stream"):
            return self._json({"id": msg_id, "type": "message", "role": "assistant",
                               "model": model, "content": [block, *more], "stop_reason": stop,
                               "stop_sequence": None, "usage": usage})
        self._sse_start()
        self._ev("message_start", {"type": "message_start", "message": {
            "id": msg_id, "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {**usage, "output_tokens": 1}}})
        self._ev("content_block_start", {"type": "content_block_start", "index": 0,
                                         "content_block": start_block})
        self._ev("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})
        self._ev("content_block_stop", {"type": "content_block_stop", "index": 0})
        for index, extra in enumerate(more, 1):
            self._ev("content_block_start", {"type": "content_block_start", "index": index,
                                             "content_block": {**extra, "input": {}}})
            self._ev("content_block_delta", {"type": "content_block_delta", "index": index,
                                             "delta": {"type": "input_json_delta",
                                                       "partial_json": json.dumps(extra["input"])}})
            self._ev("content_block_stop", {"type": "content_block_stop", "index": index})
        self._ev("message_delta", {"type": "message_delta",
                                   "delta": {"stop_reason": stop, "stop_sequence": None},
                                   "usage": {"output_tokens": 5}})
        self._ev("message_stop", {"type": "message_stop"})

    # ---- OpenAI Chat Completions --------------------------------------------------
    def chat(self, body):
        text = reply_text(body)
        model = body.get("model", ARGS.model)
        n_in = input_tokens()
        usage = {"prompt_tokens": n_in, "completion_tokens": 5, "total_tokens": n_in + 5}
        command = wanted_bash(body) if body.get("tools") else None
        read = wanted_bash(body, "FAKE_READ") if body.get("tools") else None
        if (command or read) is not None and body.get("stream"):  # one tool call, then its result
            names = [t.get("function", {}).get("name") for t in body.get("tools") or []]
            if read is not None and "read_file" in names and "read" not in names:  # Qwen Code
                name, args = "read_file", {"file_path": read}
            elif read is not None:
                name, args = "read", {"path": read}
            elif "run_commands" in names and "bash" not in names:  # Cline CLI's shell tool
                name, args = "run_commands", {"commands": [command]}
            else:
                name, args = "bash", {"command": command, "description": "fake model's command"}
            call = {"index": 0, "id": f"call_fake{abs(hash(str(args))) % 10**8}", "type": "function",
                    "function": {"name": name, "arguments": json.dumps(args)}}
            self._sse_start()
            base = {"id": "chatcmpl-fake", "object": "chat.completion.chunk",
                    "created": int(time.time()), "model": model}
            self._ev(None, {**base, "choices": [{"index": 0, "delta": {
                "role": "assistant", "content": None, "tool_calls": [call]}, "finish_reason": None}]})
            self._ev(None, {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
            self._ev(None, {**base, "choices": [], "usage": usage})
            self._ev(None, "[DONE]")
            return
        if not body.get("stream"):
            return self._json({"id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()),
                               "model": model, "choices": [{"index": 0, "finish_reason": "stop",
                               "message": {"role": "assistant", "content": text}}], "usage": usage})
        self._sse_start()
        base = {"id": "chatcmpl-fake", "object": "chat.completion.chunk",
                "created": int(time.time()), "model": model}
        self._ev(None, {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                             "finish_reason": None}]})
        self._ev(None, {**base, "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]})
        self._ev(None, {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        self._ev(None, {**base, "choices": [], "usage": usage})
        self._ev(None, "[DONE]")

    # ---- OpenAI Responses ---------------------------------------------------------
    def openai_responses(self, body):
        text = reply_text(body)
        model = body.get("model", ARGS.model)
        item = {"type": "message", "id": "msg_fake", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}]}
        tool = responses_tool(body)
        if tool is not None:
            space, _, name = tool.rpartition(".")
            item = {"type": "function_call", "id": "fc_fake", "call_id": f"call_fake{next(_IDS)}",
                    "name": name, "arguments": "{}", "status": "completed",
                    **({"namespace": space} if space else {})}
        return self.responses_reply(body, model, item)

    def responses_reply(self, body, model, item):
        text = next((c["text"] for c in item.get("content", [])), "")
        n_in = input_tokens()
        usage = {"input_tokens": n_in, "input_tokens_details": {"cached_tokens": 0},
                 "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0},
                 "total_tokens": n_in + 5}
        resp = {"id": "resp_fake", "object": "response", "created_at": int(time.time()), "model": model,
                "status": "completed", "output": [item], "usage": usage}
        if not body.get("stream"):
            return self._json(resp)
        self._sse_start()
        self._ev("response.created", {"type": "response.created",
                                      "response": {**resp, "status": "in_progress", "output": []}})
        if item["type"] == "function_call":
            self._ev("response.output_item.added", {"type": "response.output_item.added",
                                                    "output_index": 0, "item": item})
            self._ev("response.output_item.done", {"type": "response.output_item.done",
                                                   "output_index": 0, "item": item})
            self._ev("response.completed", {"type": "response.completed", "response": resp})
            return
        self._ev("response.output_item.added", {"type": "response.output_item.added", "output_index": 0,
                                                "item": {**item, "status": "in_progress", "content": []}})
        self._ev("response.content_part.added", {"type": "response.content_part.added", "item_id": "msg_fake",
                                                 "output_index": 0, "content_index": 0,
                                                 "part": {"type": "output_text", "text": "", "annotations": []}})
        self._ev("response.output_text.delta", {"type": "response.output_text.delta", "item_id": "msg_fake",
                                                "output_index": 0, "content_index": 0, "delta": text})
        self._ev("response.output_text.done", {"type": "response.output_text.done", "item_id": "msg_fake",
                                               "output_index": 0, "content_index": 0, "text": text})
        self._ev("response.output_item.done", {"type": "response.output_item.done", "output_index": 0,
                                               "item": item})
        self._ev("response.completed", {"type": "response.completed", "response": resp})


    # ---- Gemini generateContent / streamGenerateContent?alt=sse ---------------------
    def gemini(self, body, stream):
        text = reply_text({"messages": body.get("contents")})
        tool = gemini_tool(body)
        part = {"functionCall": {"name": tool, "args": {}}} if tool else {"text": text}
        n_in = input_tokens()
        read = wanted_gemini_read(body) if body.get("tools") else None
        parts = ([{"functionCall": {"name": "read_file", "args": {"file_path": read}}}]
                 if read is not None else [part])
        resp = {"candidates": [{"content": {"role": "model", "parts": parts},
                                "finishReason": "STOP", "index": 0}],
                "usageMetadata": {"promptTokenCount": n_in, "candidatesTokenCount": 5,
                                  "totalTokenCount": n_in + 5},
                "modelVersion": ARGS.model}
        if not stream:
            return self._json(resp)
        self._sse_start()
        self._ev(None, resp)


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file")
    ap.add_argument("--pid-file", help="write this process's own PID here (pyenv shims make $! unreliable)")
    ap.add_argument("--log", default="requests.jsonl")
    ap.add_argument("--reply", default="FAKE-REPLY: ok.")
    ap.add_argument("--model", default="fake-model")
    ap.add_argument("--input-tokens", type=int, default=10,
                    help="input token count reported in usage (set high to provoke auto-compaction)")
    ap.add_argument("--tokens-once-file",
                    help="if this file exists when a request arrives, its integer content is reported as "
                         "input tokens for that one request and the file is deleted (one-shot compaction trigger)")
    ap.add_argument("--verbose", action="store_true")
    ARGS = ap.parse_args()
    srv = ThreadingHTTPServer(("127.0.0.1", ARGS.port), H)
    port = srv.server_address[1]
    if ARGS.pid_file:
        with open(ARGS.pid_file, "w") as f:
            f.write(str(os.getpid()))
    if ARGS.port_file:
        with open(ARGS.port_file, "w") as f:
            f.write(str(port))
    print(f"fake model server on http://127.0.0.1:{port} logging to {ARGS.log}", flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
