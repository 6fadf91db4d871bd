"""A real OpenAI-compatible chat server on 127.0.0.1 (ephemeral port) that misbehaves on purpose.

It speaks `GET /v1/models`, `POST /v1/chat/completions` and `POST /v1/completions` (a raw prompt). What a request
gets is scripted per prompt (the content of the request's last message, or a completion's `prompt`), so one batch can mix healthy and faulty items:

    server.script("q1", "500", "500")   # the first two requests for "q1" get HTTP 500, later ones an answer
    server.script("q2", then="slow")    # every request for "q2" is slow

Steps: "ok" (the answer "echo: <prompt>", or `reply(prompt)` when given, after `delay_s`), "500", "429" (with `Retry-After: retry_after`),
"slow" (waits `slow_s` before answering), "malformed" (truncated JSON), "empty" (empty content),
"no_choices" (`"choices": []`), "close" (drops the connection without answering).
With `api_key` set, requests without `Authorization: Bearer <api_key>` get 401.

It records what the tests check: requests seen per prompt, the JSON bodies and headers received, and the
largest number of requests in flight at once. Use it as a context manager: leaving stops it, and wakes
any handler still sleeping so no thread outlives the test.
"""

from __future__ import annotations

import json
import threading
from collections import Counter, defaultdict, deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Self


STEPS = {"ok", "500", "429", "slow", "malformed", "empty", "no_choices", "close"}


class LLMTestServer:
    def __init__(
        self,
        delay_s: float = 0.0,
        slow_s: float = 30.0,
        retry_after: str = "1",
        api_key: str | None = None,
        models: tuple[str, ...] = ("test-model",),
        reply: Callable[[str], str] | None = None,
    ):
        self.delay_s, self.slow_s, self.retry_after = delay_s, slow_s, retry_after
        self.api_key, self.models = api_key, list(models)
        self.reply = reply or (lambda prompt: f"echo: {prompt}")  # what an "ok" request is answered
        self.seen: Counter[str] = Counter()
        self.bodies: list[dict] = []
        self.headers: list[dict] = []
        self.max_in_flight = 0
        self._in_flight = 0
        self._scripts: dict[str, deque[str]] = defaultdict(deque)
        self._then: dict[str, str] = {}
        self._lock = threading.Lock()
        self.stopping = threading.Event()
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.owner = self
        self.port = self._httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def script(self, prompt: str, *steps: str, then: str = "ok") -> None:
        """Requests for `prompt` get `steps` in order, then `then` forever."""
        assert set(steps) | {then} <= STEPS, f"unknown step in {steps + (then,)}"
        with self._lock:
            self._scripts[prompt].extend(steps)
            self._then[prompt] = then

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()

    def _begin(self, prompt: str, body: dict, headers: dict) -> str:
        """Record a chat request and return the step it gets."""
        with self._lock:
            self.seen[prompt] += 1
            self.bodies.append(body)
            self.headers.append(headers)
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)
            script = self._scripts[prompt]
            return script.popleft() if script else self._then.get(prompt, "ok")

    def _end(self) -> None:
        with self._lock:
            self._in_flight -= 1


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a handler still sleeping at shutdown must not block server_close
    request_queue_size = 128  # many concurrent connects on loopback without SYN retries
    owner: LLMTestServer


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format, *args) -> None:  # keep pytest output clean
        pass

    def do_GET(self) -> None:
        if not self._authorized():
            return
        if self.path.rstrip("/") != "/v1/models":
            return self._send_json(404, {"error": {"message": f"no route {self.path}"}})
        self._send_json(
            200, {"object": "list", "data": [{"id": m, "object": "model"} for m in self.server.owner.models]}
        )

    def do_POST(self) -> None:
        if self.path not in ("/v1/chat/completions", "/v1/completions"):
            return self._send_json(404, {"error": {"message": f"no route {self.path}"}})
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = body["prompt"] if self.path == "/v1/completions" else body["messages"][-1]["content"]
        owner = self.server.owner
        step = owner._begin(prompt, body, dict(self.headers))
        self._in_flight = True
        try:
            if self._authorized():
                self._respond(step, prompt, body)
        finally:
            self._leave_in_flight()

    def _leave_in_flight(self) -> None:
        """The request leaves the in-flight count before its response goes out: once a client has the response it may
        send its next request, and under load that one can arrive before this thread runs again."""
        if getattr(self, "_in_flight", False):
            self._in_flight = False
            self.server.owner._end()

    def _respond(self, step: str, prompt: str, body: dict) -> None:
        owner = self.server.owner
        if step == "close":
            self.close_connection = True  # no status line at all: the client sees a dropped connection
        elif step == "500":
            self._send_json(500, {"error": {"message": "injected server error"}})
        elif step == "429":
            self._send_json(429, {"error": {"message": "rate limited"}}, {"Retry-After": owner.retry_after})
        elif step == "malformed":
            self._send(200, b'{"choices": [{"message": {"content": "trunc', "application/json")
        elif step == "no_choices":
            self._send_json(200, {"object": "chat.completion", "choices": []})
        elif step == "empty":
            self._send_json(200, _completion(body, ""))
        elif not owner.stopping.wait(owner.slow_s if step == "slow" else owner.delay_s):
            self._send_json(200, _completion(body, owner.reply(prompt)))

    def _authorized(self) -> bool:
        key = self.server.owner.api_key
        if key is None or self.headers.get("Authorization") == f"Bearer {key}":
            return True
        self._send_json(401, {"error": {"message": "invalid api key"}})
        return False

    def _send_json(self, status: int, payload: dict, headers: dict | None = None) -> None:
        self._send(status, json.dumps(payload).encode(), "application/json", headers)

    def _send(self, status: int, data: bytes, content_type: str, headers: dict | None = None) -> None:
        self._leave_in_flight()
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except OSError:  # the client gave up (its timeout); nothing left to tell it
            self.close_connection = True


def _completion(body: dict, text: str) -> dict:
    if "prompt" in body:  # /v1/completions
        return {"id": "cmpl-test", "object": "text_completion", "model": body.get("model", "test-model"),
                "choices": [{"index": 0, "text": text, "finish_reason": "stop"}]}
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "model": body.get("model", "test-model"),
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
    }
