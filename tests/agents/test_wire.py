"""The providers' wire formats: usage read off every answer shape, requests read, errors in each provider's shape."""

from __future__ import annotations

import json

from agent.agents.wire import error_body, metered_usage, sse_events, with_stream_usage
from agent.models.base import Usage


def test_usage_is_read_from_every_wire_format():
    anthropic_events = sse_events(
        b'event: message_start\ndata: {"type":"message_start","message":{"model":"claude-x","usage":'
        b'{"input_tokens":10,"output_tokens":1,"cache_read_input_tokens":4}}}\n\n'
        b'event: message_delta\ndata: {"type":"message_delta","usage":{"output_tokens":7}}\n\n')
    assert metered_usage("anthropic", "/v1/messages", None, anthropic_events) == (
        "claude-x", Usage(input_tokens=10, output_tokens=7, cache_read=4))
    responses = [{"type": "response.completed", "response": {"model": "gpt-5", "usage": {
        "input_tokens": 100, "input_tokens_details": {"cached_tokens": 40}, "output_tokens": 9}}}]
    assert metered_usage("openai", "/v1/responses", None, responses) == (
        "gpt-5", Usage(input_tokens=60, output_tokens=9, cache_read=40))
    chat = {"model": "gpt-4o", "usage": {"prompt_tokens": 50, "completion_tokens": 5}}
    assert metered_usage("openai", "/v1/chat/completions", chat, []) == ("gpt-4o",
                                                                         Usage(input_tokens=50, output_tokens=5))
    assert metered_usage("anthropic", "/v1/messages", {"error": "x"}, []) is None


def test_web_searches_are_read_off_the_wire():
    message = {"model": "claude-sonnet-4-6", "usage": {"input_tokens": 10, "output_tokens": 5,
                                                       "server_tool_use": {"web_search_requests": 2}}}
    assert metered_usage("anthropic", "/v1/messages", message, []) == (
        "claude-sonnet-4-6", Usage(input_tokens=10, output_tokens=5, web_search_requests=2))
    streamed = [{"type": "message_start", "message": {"model": "claude-sonnet-4-6", "usage": {"input_tokens": 10}}},
                {"type": "message_delta", "usage": {"output_tokens": 5, "server_tool_use": {"web_search_requests": 3}}}]
    assert metered_usage("anthropic", "/v1/messages", None, streamed)[1].web_search_requests == 3
    response = {"model": "gpt-5", "output": [{"type": "web_search_call", "id": "ws_1"}, {"type": "message"}],
                "usage": {"input_tokens": 100, "output_tokens": 9}}
    assert metered_usage("openai", "/v1/responses", response, [])[1].web_search_requests == 1


def test_only_a_streamed_chat_completion_is_asked_for_its_usage():
    body = {"model": "gpt-4o", "stream": True, "stream_options": {"other": 1}}
    assert json.loads(with_stream_usage("openai", "/v1/chat/completions", body)) == {
        "model": "gpt-4o", "stream": True, "stream_options": {"other": 1, "include_usage": True}}
    assert with_stream_usage("openai", "/v1/chat/completions", body) is None  # it asks already
    assert with_stream_usage("openai", "/v1/chat/completions", {"stream": False}) is None
    assert with_stream_usage("openai", "/v1/responses", {"stream": True}) is None
    assert with_stream_usage("anthropic", "/v1/messages", {"stream": True}) is None


def test_errors_take_each_providers_shape():
    assert json.loads(error_body("anthropic", 403, "no")) == {
        "type": "error", "error": {"type": "permission_error", "message": "no"}}
    assert json.loads(error_body("openai", 404, "gone", code="model_not_found", param="model")) == {
        "error": {"message": "gone", "type": "invalid_request_error", "param": "model", "code": "model_not_found"}}
