"""A step whose assistant requests all fail says why: the last error's text travels with the count (issue 38:
faults that start mid-run are retried, dropped and counted, with the cause in the warning)."""

from __future__ import annotations

import socket

from coreward.llm.openai_endpoint import OpenAIEndpointGenerator
from coreward.rewards.cooper.assistant import LLMAssistant, NegativeRequest, write_negatives


def test_failed_requests_keep_the_last_error(verifier):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # released: nothing listens there
    generator = OpenAIEndpointGenerator(f"http://127.0.0.1:{port}/v1", "m", backoff_s=0.01, timeout_s=1.0,
                                        max_retries=0, deadline_s=5.0)
    requests = [NegativeRequest("1+1?", "1+1=2 #### 2", "2", seed) for seed in range(2)]
    outcome = write_negatives(LLMAssistant(generator), verifier, requests, max_retries=0)
    generator.close()
    assert outcome.texts == [None, None] and outcome.failures == 2
    assert outcome.last_error and "Connect" in outcome.last_error, outcome.last_error
