"""Text-generation backends: the OpenAI-compatible endpoint against a real local HTTP server that misbehaves
on purpose (tests/helpers/llm_test_server.py).

The endpoint tests use millisecond backoffs so that every retry path runs in well under a second.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from coreward.llm import (
    GenerationRequest,
    OpenAIEndpointGenerator,
    build_generator,
)
from coreward.runtime.errors import CorewardError
from tests.helpers.kill_resume import free_port
from tests.helpers.llm_test_server import LLMTestServer


FAST = {"backoff_s": 0.01, "timeout_s": 2.0, "max_retries": 4, "deadline_s": 20.0}


@pytest.fixture(autouse=True)
def no_api_key_from_env(monkeypatch):
    monkeypatch.delenv("COREWARD_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


@pytest.fixture
def server():
    with LLMTestServer() as running:
        yield running


def endpoint(server: LLMTestServer, **options) -> OpenAIEndpointGenerator:
    return OpenAIEndpointGenerator(server.url, "test-model", **{**FAST, **options})


def asks(*prompts: str, **sampling) -> list[GenerationRequest]:
    return [GenerationRequest.user(prompt, **sampling) for prompt in prompts]



# -- OpenAI-compatible endpoint ----------------------------------------------------------------------


def test_results_keep_request_order_and_carry_sampling_settings(server):
    prompts = [f"question {i}" for i in range(20)]
    with endpoint(server, api_key="k") as generator:
        results = generator.generate(asks(*prompts, temperature=0.3, top_p=0.9, max_tokens=64, seed=7))
    assert [r.text for r in results] == [f"echo: {p}" for p in prompts]
    assert all(r.ok and r.error is None and r.attempts == 1 and r.latency_s > 0 for r in results)
    sent = {key: server.bodies[0][key] for key in ("model", "temperature", "top_p", "max_tokens", "seed")}
    assert sent == {"model": "test-model", "temperature": 0.3, "top_p": 0.9, "max_tokens": 64, "seed": 7}
    assert server.headers[0]["Authorization"] == "Bearer k"


def test_concurrency_is_bounded():
    with LLMTestServer(delay_s=0.05) as server, endpoint(server, max_concurrency=4) as generator:
        started = time.perf_counter()
        results = generator.generate(asks(*(f"q{i}" for i in range(24))))
        elapsed = time.perf_counter() - started
    assert all(r.ok for r in results)
    assert 2 <= server.max_in_flight <= 4  # requests do overlap, but never more than the bound
    assert elapsed >= 24 / 4 * 0.05 * 0.9


def test_transient_faults_are_retried_until_success():
    with LLMTestServer(retry_after="0.3", slow_s=5.0) as server:
        server.script("flaky", "500", "500")
        server.script("limited", "429")
        server.script("garbled", "malformed", "empty", "no_choices", "close")
        server.script("stalled", "slow")
        with endpoint(server, timeout_s=0.5) as generator:
            results = generator.generate(asks("flaky", "limited", "garbled", "stalled", "fine"))
            stats = generator.stats
    assert [r.text for r in results] == ["echo: flaky", "echo: limited", "echo: garbled", "echo: stalled", "echo: fine"]
    assert [r.attempts for r in results] == [3, 2, 5, 2, 1]
    assert results[1].latency_s >= 0.3  # waited for Retry-After, not the 10 ms backoff
    assert stats["requests"] == 5 and stats["failures"] == 0 and stats["retries"] == 2 + 1 + 4 + 1
    assert stats["mean_latency_s"] > 0


def test_retry_after_is_capped():
    with LLMTestServer(retry_after="3600") as server, endpoint(server, max_backoff_s=0.1) as generator:
        server.script("limited", "429")
        started = time.perf_counter()
        [result] = generator.generate(asks("limited"))
    assert result.text == "echo: limited" and time.perf_counter() - started < 5


def test_permanent_failure_is_a_per_item_error(server):
    server.script("broken", then="500")
    server.script("garbage", then="malformed")
    with endpoint(server, max_retries=2) as generator:
        broken, fine, garbage = generator.generate(asks("broken", "fine", "garbage"))
        stats = generator.stats
    assert (stats["requests"], stats["failures"], stats["retries"]) == (3, 2, 4)
    assert broken.text is None and broken.error.startswith("HTTP 500") and broken.attempts == 3
    assert garbage.text is None and "malformed JSON" in garbage.error
    assert fine.text == "echo: fine"
    assert server.seen["broken"] == 3


def test_client_errors_are_not_retried():
    with LLMTestServer(api_key="secret") as server:
        with endpoint(server) as generator:
            [result] = generator.generate(asks("hello"))
            with pytest.raises(CorewardError, match="refused the API key"):
                generator.health_check()
        assert result.text is None and result.error.startswith("HTTP 401") and result.attempts == 1
        assert server.seen["hello"] == 1
        with endpoint(server, api_key="secret") as generator:
            generator.health_check()
            assert generator.generate(asks("hello"))[0].text == "echo: hello"


def test_deadline_bounds_the_batch():
    with LLMTestServer(slow_s=30.0) as server:
        server.script("stuck", then="slow")
        with endpoint(server, timeout_s=10.0, deadline_s=0.5) as generator:
            started = time.perf_counter()
            results = generator.generate(asks("stuck", "fine", "stuck"))
            elapsed = time.perf_counter() - started
            assert generator.stats["failures"] == 2
    assert elapsed < 2.0
    assert results[1].text == "echo: fine"
    assert [r.error for r in (results[0], results[2])] == ["deadline", "deadline"]


def test_ctrl_c_stops_the_batchs_queued_requests_and_the_endpoint_serves_the_next_batch():
    """A real SIGINT while 30 requests wait for 2 slots: the KeyboardInterrupt reaches the caller and the requests
    still queued are never sent (before, the loop's thread went on sending them until close())."""
    import os
    import signal
    import threading

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # a pytest-xdist worker ignores SIGINT
    try:
        with LLMTestServer(delay_s=0.2) as server, endpoint(server, max_concurrency=2) as generator:
            threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
            with pytest.raises(KeyboardInterrupt):
                generator.generate(asks(*(f"q{i}" for i in range(30))))
            sent_when_stopped = sum(server.seen.values())
            time.sleep(1.0)  # the 2 slots would have sent about 10 more in this time
            assert 2 <= sent_when_stopped < 30
            assert sum(server.seen.values()) - sent_when_stopped <= 2  # at most what was being dispatched at the signal
            assert [r.text for r in generator.generate(asks("after"))] == ["echo: after"]
    finally:
        signal.signal(signal.SIGINT, previous)


def test_endpoint_down_fails_fast_at_startup_and_per_item_later():
    url = f"http://127.0.0.1:{free_port()}/v1"
    with OpenAIEndpointGenerator(url, "m", max_retries=2, backoff_s=0.05, deadline_s=20.0) as generator:
        with pytest.raises(CorewardError, match=f"{url} is not reachable"):
            generator.health_check()
        started = time.perf_counter()
        results = generator.generate(asks("a", "b", "c"))
        assert time.perf_counter() - started < 5.0
        assert generator.stats["failures"] == 3
    assert all(r.text is None and "Connect" in r.error and r.attempts == 3 for r in results)


def test_health_check_names_a_wrong_model_or_a_missing_v1(server):
    with endpoint(server) as generator:
        generator.health_check()
    wrong_model = OpenAIEndpointGenerator(server.url, "no-such-model")
    with wrong_model, pytest.raises(CorewardError, match="does not serve model 'no-such-model'.*test-model"):
        wrong_model.health_check()
    root = server.url.removesuffix("/v1")
    without_v1 = OpenAIEndpointGenerator(root, "test-model")
    with without_v1, pytest.raises(CorewardError, match=f"{root}.*end in /v1"):
        without_v1.health_check()


def test_generate_works_from_threads_and_inside_a_running_loop(server):
    with endpoint(server) as generator:

        async def inside_a_loop():
            return generator.generate(asks("from a loop"))[0].text

        assert asyncio.run(inside_a_loop()) == "echo: from a loop"
        with ThreadPoolExecutor(3) as pool:
            texts = list(pool.map(lambda p: generator.generate(asks(p))[0].text, ["t1", "t2", "t3"]))
        assert texts == ["echo: t1", "echo: t2", "echo: t3"]
        assert generator.stats["requests"] == 4
    generator.close()  # a second close is harmless


# -- factory -------------------------------------------------------------------------------------------


def test_factory_builds_endpoints_from_urls_and_dicts():
    with build_generator("http://127.0.0.1:9/v1#my-model") as generator:
        assert isinstance(generator, OpenAIEndpointGenerator)
        assert (generator.base_url, generator.model) == ("http://127.0.0.1:9/v1", "my-model")
    with build_generator({"backend": "openai", "base_url": "https://example.invalid/v1/", "max_concurrency": 3}) as g:
        assert (g.base_url, g.model, g.max_concurrency) == ("https://example.invalid/v1", None, 3)
    with pytest.raises(CorewardError, match="'backend' must be one of"):
        build_generator({"backend": "vllm"})
    with pytest.raises(CorewardError, match=r"unknown generator option\(s\) \['concurrency'\]"):
        build_generator({"backend": "openai", "base_url": "http://x/v1", "concurrency": 2})
    with pytest.raises(CorewardError, match=r"needs option\(s\) \['base_url'\]"):
        build_generator({"backend": "openai"})
    with pytest.raises(CorewardError, match="directory '/nonexistent/model/dir' does not exist"):
        build_generator("/nonexistent/model/dir")


# -- local Hugging Face model --------------------------------------------------------------------------


def test_api_key_comes_from_a_key_file_or_a_named_environment_variable(server, tmp_path, monkeypatch):
    key_file = tmp_path / "key"
    key_file.write_text("from-file\n")
    with endpoint(server, api_key_file=str(key_file)) as generator:
        generator.generate(asks("1+1"))
    monkeypatch.setenv("MY_JUDGE_KEY", "from-env")
    with build_generator({"backend": "openai", "base_url": server.url, "model": "test-model",
                          "api_key_env": "MY_JUDGE_KEY", **FAST}) as generator:
        generator.generate(asks("1+1"))
    assert [h["Authorization"] for h in server.headers] == ["Bearer from-file", "Bearer from-env"]
    with pytest.raises(CorewardError, match="api_key_file: can't read .*missing"):
        endpoint(server, api_key_file=str(tmp_path / "missing"))
    with pytest.raises(CorewardError, match="environment variable NOT_SET_HERE is not set"):
        endpoint(server, api_key_env="NOT_SET_HERE")
