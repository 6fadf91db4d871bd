"""An OpenAI-compatible chat endpoint (vLLM, SGLang, llama.cpp, Ollama, OpenAI) as a text generator.

A batch is sent as concurrent `POST {base_url}/chat/completions` requests (a raw request: `/completions`, the
text as its `prompt`), at most `max_concurrency` in flight. Each request gets `timeout_s` per attempt and is retried with exponential backoff and jitter when
another try may help: connection errors, timeouts, HTTP 408, 429 (after the server's Retry-After), 5xx,
and 200 answers that carry no usable text (malformed JSON, no `choices[0].message.content`, empty text).
Other 4xx (bad key, unknown model, prompt too long) fail at once. After `deadline_s` the whole batch stops
and every unfinished item fails with an error starting with "deadline", so one dead server costs a training
step at most `deadline_s`.

`generate()` is synchronous. The async work runs on a private event loop in a daemon thread owned by the
generator, so it works the same from the main thread, a worker thread, or code already inside a running loop
(a notebook), and the HTTP connection pool is reused across calls.
"""

from __future__ import annotations

import asyncio
import os
import random
import threading
import time
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import httpx

from coreward.llm.base import GenerationRequest, GenerationResult, TextGenerator
from coreward.runtime.errors import CorewardError
from coreward.verify.extract import encodable


class _AttemptFailed(Exception):
    """One failed try. `retryable`: another try may succeed; `retry_after`: the server's requested wait."""

    def __init__(self, message: str, retryable: bool = True, retry_after: float | None = None):
        super().__init__(message)
        self.retryable = retryable
        self.retry_after = retry_after


class OpenAIEndpointGenerator(TextGenerator):
    """Chat completions from `base_url` (the part before `/chat/completions`, usually ending in `/v1`).

    `model=None` leaves the field out, which servers of a single model (vLLM, SGLang, llama.cpp) accept.
    The API key defaults to $COREWARD_API_KEY, then $OPENAI_API_KEY. No single wait between tries (backoff
    or Retry-After) exceeds `max_backoff_s`. Call `health_check()` at startup to fail fast on a wrong URL,
    key or model name.
    """

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        api_key: str | None = None,
        *,
        api_key_env: str | None = None,
        api_key_file: str | None = None,
        max_concurrency: int = 16,
        timeout_s: float = 60.0,
        max_retries: int = 4,
        backoff_s: float = 1.0,
        deadline_s: float = 300.0,
        max_backoff_s: float = 30.0,
    ):
        super().__init__()
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.max_concurrency = max_concurrency
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.deadline_s = deadline_s
        self.max_backoff_s = max_backoff_s
        # keys belong outside configs (a config is copied into the run directory, redacted): a key file,
        # an environment variable named here, or COREWARD_API_KEY / OPENAI_API_KEY
        api_key = api_key or _key_from(api_key_env, api_key_file) or os.environ.get("COREWARD_API_KEY") \
            or os.environ.get("OPENAI_API_KEY")
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._jitter = random.Random()
        self._slots = asyncio.Semaphore(max_concurrency)  # shared by concurrent generate() calls
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="coreward-llm-endpoint", daemon=True)
        self._thread.start()
        self._client = self._run(self._open_client())

    def __repr__(self) -> str:  # never shows the key
        return f"OpenAIEndpointGenerator({self.base_url!r}, model={self.model!r})"

    # -- startup check -------------------------------------------------------------------------------

    def health_check(self) -> None:
        """Raise CorewardError naming the URL if the endpoint is unreachable, refuses the key or lacks the model."""
        url = f"{self.base_url}/models"
        try:
            response = httpx.get(url, headers=self._headers, timeout=min(self.timeout_s, 10.0))
        except httpx.HTTPError as exc:
            raise CorewardError(
                f"LLM endpoint {self.base_url} is not reachable ({type(exc).__name__}: {exc}); "
                "check the URL and that the server is running"
            ) from None
        if response.status_code in (401, 403):
            raise CorewardError(
                f"LLM endpoint {self.base_url} refused the API key (HTTP {response.status_code}); "
                "set COREWARD_API_KEY or OPENAI_API_KEY, or pass api_key"
            )
        if response.status_code == 404:
            raise CorewardError(
                f"LLM endpoint {self.base_url} has no {url} (HTTP 404): does the URL need to end in /v1?"
            )
        if not response.is_success:
            raise CorewardError(f"LLM endpoint {self.base_url} answered HTTP {response.status_code} on {url}")
        served = _served_models(response)
        if self.model is not None and served and self.model not in served:
            raise CorewardError(f"LLM endpoint {self.base_url} does not serve model {self.model!r}; it serves {served}")

    # -- generation ----------------------------------------------------------------------------------

    def _generate(self, requests: list[GenerationRequest]) -> list[GenerationResult]:
        return self._run(self._generate_all(requests))

    def _run(self, coroutine):
        """Run a coroutine on the private loop and wait for it from whatever thread we are on."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        try:
            return future.result()
        except BaseException:
            # Ctrl-C lands here, in the waiting thread, while the loop's thread goes on: cancel the batch so that its
            # queued requests are not sent (they were, until close()) and the in-flight ones are dropped
            future.cancel()
            raise

    async def _open_client(self) -> httpx.AsyncClient:
        limits = httpx.Limits(max_connections=self.max_concurrency)
        return httpx.AsyncClient(headers=self._headers, timeout=self.timeout_s, limits=limits)

    async def _generate_all(self, requests: list[GenerationRequest]) -> list[GenerationResult]:
        deadline = asyncio.get_running_loop().time() + self.deadline_s
        return list(await asyncio.gather(*(self._generate_one(request, deadline) for request in requests)))

    async def _generate_one(self, request: GenerationRequest, deadline: float) -> GenerationResult:
        """Try until success, a permanent error, `max_retries` retries, or the batch deadline."""
        started, attempts, error = time.perf_counter(), 0, None
        payload = self._payload(request)
        try:
            async with asyncio.timeout_at(deadline):
                while True:
                    attempts += 1
                    try:
                        async with self._slots:  # held only while a request is in flight, not while backing off
                            text = await self._attempt(payload)
                        return GenerationResult(text, latency_s=time.perf_counter() - started, attempts=attempts)
                    except _AttemptFailed as exc:
                        error = str(exc)
                        if not exc.retryable or attempts > self.max_retries:
                            break
                        await asyncio.sleep(self._wait_s(attempts, exc.retry_after))
        except TimeoutError:
            error = "deadline" + (f" (last error: {error})" if error else "")
        return GenerationResult(None, error, time.perf_counter() - started, attempts)

    def _payload(self, request: GenerationRequest) -> dict:
        # message text may be a policy's output: a lone surrogate in it would make the UTF-8 body fail to encode
        text = {"prompt": encodable(request.messages[0]["content"])} if request.raw else {"messages": [
            {**m, "content": encodable(m["content"])} if isinstance(m.get("content"), str) else m
            for m in request.messages
        ]}
        payload = {
            **text,
            "temperature": request.temperature,
            "top_p": request.top_p,
            "max_tokens": request.max_tokens,
        }
        if self.model is not None:
            payload["model"] = self.model
        if request.seed is not None:
            payload["seed"] = request.seed
        if request.chat_template_kwargs:
            payload["chat_template_kwargs"] = request.chat_template_kwargs
        return payload

    async def _attempt(self, payload: dict) -> str:
        """One POST; returns the completion text or raises _AttemptFailed saying whether to retry."""
        try:
            async with asyncio.timeout(self.timeout_s):  # total time, not httpx's per-read timeout
                route = "completions" if "prompt" in payload else "chat/completions"
                response = await self._client.post(f"{self.base_url}/{route}", json=payload)
        except TimeoutError:
            raise _AttemptFailed(f"timeout after {self.timeout_s:g} s") from None
        except httpx.RequestError as exc:  # connection refused or reset, httpx's own timeouts, bad protocol
            raise _AttemptFailed(f"{type(exc).__name__}: {exc}") from None
        if not response.is_success:
            status = response.status_code
            raise _AttemptFailed(
                f"HTTP {status}: {response.text[:200]}",
                retryable=status in (408, 429) or status >= 500,
                retry_after=_retry_after_s(response.headers.get("retry-after")),
            )
        return _completion_text(response)

    def _wait_s(self, attempt: int, retry_after: float | None) -> float:
        """The server's Retry-After when given, else backoff_s · 2^(attempt-1) · U(0.5, 1.5); capped."""
        if retry_after is None:
            retry_after = self.backoff_s * 2 ** (attempt - 1) * self._jitter.uniform(0.5, 1.5)
        return min(retry_after, self.max_backoff_s)

    def close(self) -> None:
        """Close the connection pool and stop the private loop's thread."""
        if self._loop.is_closed():
            return
        self._run(self._client.aclose())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()


def _completion_text(response: httpx.Response) -> str:
    """`choices[0].message.content` (`choices[0].text` from `/completions`) of a 2xx answer; anything unusable is a (retryable) failed attempt."""
    try:
        body = response.json()
    except ValueError:
        raise _AttemptFailed(f"malformed JSON in the response: {response.text[:200]!r}") from None
    try:
        choice = body["choices"][0]
        content = choice["text"] if "text" in choice else choice["message"]["content"]  # a completion's, a chat's
    except (KeyError, IndexError, TypeError):
        raise _AttemptFailed(f"response without choices[0].message.content: {response.text[:200]!r}") from None
    if not isinstance(content, str) or not content.strip():
        raise _AttemptFailed("empty completion")
    return content


def _retry_after_s(value: str | None) -> float | None:
    """Retry-After in seconds, from either of its forms (delta-seconds or an HTTP date); None if absent or bad."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, (parsedate_to_datetime(value) - datetime.now(UTC)).total_seconds())
    except (TypeError, ValueError):
        return None


def _served_models(response: httpx.Response) -> list[str]:
    """Model ids of a `/models` answer; empty when the server's answer doesn't list any."""
    try:
        return [entry["id"] for entry in response.json()["data"]]
    except (ValueError, KeyError, TypeError):
        return []


def _key_from(env: str | None, file: str | None) -> str | None:
    """The key in environment variable `env` or in file `file` (first line); a named but missing one is an error."""
    from coreward.runtime.errors import CorewardError

    if env:
        if not os.environ.get(env):
            raise CorewardError(f"api_key_env: environment variable {env} is not set")
        return os.environ[env]
    if file:
        try:
            key = open(os.path.expanduser(file)).read().strip().splitlines()
        except OSError as err:
            raise CorewardError(f"api_key_file: can't read {file}: {err.strerror}") from None
        if not key or not key[0].strip():
            raise CorewardError(f"api_key_file: {file} is empty")
        return key[0].strip()
    return None
