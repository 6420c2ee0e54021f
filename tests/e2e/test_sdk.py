"""The official OpenAI Python SDK, sync and async, against inferrail-sim and inferrail-gateway.

Each test runs once straight to a simulator and once through the gateway in front of three
(see conftest.py). What the simulator guarantees, and these tests lean on: the reply, and so
its length, depends only on the prompt (it stops on its own after 16 to 256 tokens unless
max_tokens comes first or ignore_eos is set), so the same request streamed and not reports
the same usage; prompt_tokens is what /tokenize counts; a repeated prompt finds every full
16-token block but the one holding its last token in the prefix cache.
"""

import asyncio
import re
import time

import openai
import pytest

from fleet import BLOCK_SIZE, MODEL, RUN_TAG, user, words

HEX32 = re.compile(r"^[0-9a-f]{32}$")


def check_usage(usage, *, prompt=None, completion=None):
    assert usage is not None, "no usage"
    assert usage.prompt_tokens > 0
    assert usage.completion_tokens > 0
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    if prompt is not None:
        assert usage.prompt_tokens == prompt, "prompt_tokens differs from what /tokenize counts"
    if completion is not None:
        assert usage.completion_tokens == completion
    details = usage.prompt_tokens_details
    assert details is not None and details.cached_tokens is not None, \
        "no prompt_tokens_details.cached_tokens (--enable-prompt-tokens-details is on)"
    assert 0 <= details.cached_tokens < usage.prompt_tokens


def check_headers(target, headers, usage):
    """Through the gateway, its headers name a replica and agree with the engine's usage;
    straight to a simulator there are none."""
    if not target.gateway:
        assert "x-inferrail-replica" not in headers
        return None
    replica = headers.get("x-inferrail-replica")
    assert replica in target.engines, f"x-inferrail-replica {replica!r}"
    assert int(headers["x-inferrail-prompt-tokens"]) == usage.prompt_tokens
    assert int(headers["x-inferrail-cached-tokens"]) == usage.prompt_tokens_details.cached_tokens
    assert headers.get("x-request-id")
    return replica


def read_chat_stream(stream):
    """Reads a chat stream to its end and checks its shape: a role chunk first, one id
    throughout, exactly one finish_reason, then one usage chunk without choices, last.
    Returns (text, finish_reason, usage, chunks)."""
    chunks = list(stream)
    return chat_chunks(chunks)


def chat_chunks(chunks):
    assert chunks, "no chunks"
    ids = {c.id for c in chunks}
    assert len(ids) == 1 and next(iter(ids)).startswith("chatcmpl-"), ids
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert chunks[0].choices and chunks[0].choices[0].delta.role == "assistant"
    *body, last = chunks
    assert last.choices == [] and last.usage is not None, "the stream did not end with a usage chunk"
    assert all(c.usage is None for c in body), "usage before the last chunk"
    finishes = [ch.finish_reason for c in body for ch in c.choices if ch.finish_reason]
    assert len(finishes) == 1, f"finish_reason {finishes}"
    assert body[-1].choices[0].finish_reason == finishes[0], "finish_reason is not on the last choice chunk"
    text = "".join(ch.delta.content or "" for c in body for ch in c.choices)
    return text, finishes[0], last.usage, len(chunks)


def completion_chunks(chunks):
    assert chunks, "no chunks"
    ids = {c.id for c in chunks}
    assert len(ids) == 1 and next(iter(ids)).startswith("cmpl-"), ids
    *body, last = chunks
    assert last.choices == [] and last.usage is not None, "the stream did not end with a usage chunk"
    assert all(c.usage is None for c in body), "usage before the last chunk"
    finishes = [ch.finish_reason for c in body for ch in c.choices if ch.finish_reason]
    assert len(finishes) == 1, f"finish_reason {finishes}"
    text = "".join(ch.text for c in body for ch in c.choices)
    return text, finishes[0], last.usage, len(chunks)


# --- chat and completions, streamed and not ---------------------------------------------------


def test_chat(target):
    client = target.client()
    messages = user(words("chat", 12))
    raw = client.chat.completions.with_raw_response.create(
        model=target.model, messages=messages, max_tokens=8)
    res = raw.parse()
    assert res.id.startswith("chatcmpl-") and len(res.id) > len("chatcmpl-")
    assert res.object == "chat.completion"
    assert res.model == MODEL
    assert res.created > 0
    assert len(res.choices) == 1
    choice = res.choices[0]
    assert choice.index == 0
    assert choice.message.role == "assistant"
    assert choice.message.content
    assert choice.finish_reason == "length"
    check_usage(res.usage, prompt=target.count_tokens(messages=messages), completion=8)
    check_headers(target, raw.headers, res.usage)


def test_chat_streamed_equals_unstreamed(target):
    """No max_tokens: the stand-in model stops on its own, at the same token both times."""
    client = target.client()
    messages = user(words("chat-pair", 12))
    raw = client.chat.completions.with_raw_response.create(model=target.model, messages=messages)
    full = raw.parse()
    check_headers(target, raw.headers, full.usage)
    prompt = target.count_tokens(messages=messages)
    check_usage(full.usage, prompt=prompt)
    assert full.choices[0].finish_reason == "stop"
    assert 16 <= full.usage.completion_tokens <= 256

    raw = client.chat.completions.with_raw_response.create(
        model=target.model, messages=messages, stream=True, stream_options={"include_usage": True})
    text, finish, usage, _ = read_chat_stream(raw.parse())
    check_headers(target, raw.headers, usage)
    assert text == full.choices[0].message.content
    assert finish == "stop"
    check_usage(usage, prompt=prompt, completion=full.usage.completion_tokens)


def test_chat_stream_without_usage(target):
    """Without stream_options no chunk carries usage."""
    client = target.client()
    chunks = list(client.chat.completions.create(
        model=target.model, messages=user(words("no-usage", 6)), max_tokens=5, stream=True))
    assert chunks and all(c.usage is None for c in chunks)
    assert chunks[-1].choices[0].finish_reason == "length"


def test_completion_streamed_equals_unstreamed(target):
    client = target.client()
    prompt_text = words("complete", 10)
    raw = client.completions.with_raw_response.create(model=target.model, prompt=prompt_text, max_tokens=300)
    full = raw.parse()
    assert full.id.startswith("cmpl-")
    assert full.object == "text_completion"
    assert full.model == MODEL
    assert len(full.choices) == 1 and full.choices[0].text
    assert full.choices[0].finish_reason == "stop"
    prompt = target.count_tokens(prompt=prompt_text)
    check_usage(full.usage, prompt=prompt)
    check_headers(target, raw.headers, full.usage)

    raw = client.completions.with_raw_response.create(
        model=target.model, prompt=prompt_text, max_tokens=300, stream=True,
        stream_options={"include_usage": True})
    text, finish, usage, _ = completion_chunks(list(raw.parse()))
    check_headers(target, raw.headers, usage)
    assert text == full.choices[0].text
    assert finish == "stop"
    check_usage(usage, prompt=prompt, completion=full.usage.completion_tokens)


def test_completion_default_max_tokens(target):
    """vLLM's completions default to 16 tokens when max_tokens is left out; the model never
    stops on its own before that."""
    res = target.client().completions.create(model=target.model, prompt=words("default-max", 5))
    assert res.usage.completion_tokens == 16
    assert res.choices[0].finish_reason == "length"


def test_prefix_cache_on_repeat(target):
    """The first request finds nothing cached; the same prompt again, on the engine that
    served it, finds every full block but the last token's. Through the gateway,
    x-inferrail-cached-tokens (its prediction for the replica it chose) equals the engine's
    count on every answer."""
    client = target.client()
    messages = user(words("cache", 200))
    prompt = target.count_tokens(messages=messages)
    assert prompt > 4 * BLOCK_SIZE
    raw = client.chat.completions.with_raw_response.create(model=target.model, messages=messages, max_tokens=4)
    first = raw.parse()
    check_usage(first.usage, prompt=prompt, completion=4)
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    home = check_headers(target, raw.headers, first.usage)

    # Streamed repeats until one lands on the replica that served the first (the gateway
    # routes round robin over three); the usage chunk carries cached_tokens too.
    for _ in range(2 * len(target.engines) + 1):
        raw = client.chat.completions.with_raw_response.create(
            model=target.model, messages=messages, max_tokens=4, stream=True,
            stream_options={"include_usage": True})
        text, _, usage, _ = read_chat_stream(raw.parse())
        check_usage(usage, prompt=prompt, completion=4)
        assert text == first.choices[0].message.content
        replica = check_headers(target, raw.headers, usage)
        if replica == home:
            break
        assert usage.prompt_tokens_details.cached_tokens == 0, f"cache hit on {replica}, which never saw the prompt"
    else:
        pytest.fail(f"no repeat went back to {home}")
    assert usage.prompt_tokens_details.cached_tokens == (prompt - 1) // BLOCK_SIZE * BLOCK_SIZE


# --- models and errors --------------------------------------------------------------------


def test_models(target):
    page = target.client().models.list()
    ids = [m.id for m in page.data]
    assert ids == ([MODEL, "sim"] if target.gateway else [MODEL])
    for m in page.data:
        assert m.object == "model"
        assert m.owned_by == "vllm"
        extra = m.model_extra or {}
        assert extra.get("root") == MODEL, f"{m.id}: root {extra.get('root')!r}"
        assert extra.get("max_model_len") == 32768


def check_error(err, status, etype, param):
    """vLLM's error shape: {"error": {"message", "type", "param", "code"}}."""
    assert err.status_code == status
    body = err.response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["code"] == status and body["error"]["type"] == etype
    assert body["error"]["param"] == param
    # The SDK hands the inner object over, and turns the numeric code into a string.
    assert err.body == body["error"]
    assert err.type == etype and err.param == param and err.code == str(status)
    assert body["error"]["message"] in str(err)


@pytest.mark.parametrize("stream", [False, True], ids=["unstreamed", "streamed"])
def test_unknown_model(target, stream):
    client = target.client()
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="no-such-model", messages=user("hi"), max_tokens=4, stream=stream)
    check_error(info.value, 404, "NotFoundError", "model")
    assert "no-such-model" in info.value.body["message"]
    with pytest.raises(openai.NotFoundError) as info:
        client.completions.create(model="no-such-model", prompt="hi", max_tokens=4, stream=stream)
    check_error(info.value, 404, "NotFoundError", "model")
    # The gateway answers this one itself, with a request id.
    if target.gateway:
        assert HEX32.match(info.value.request_id)


BAD_REQUESTS = [
    ("max_tokens", {"max_tokens": -1}),
    ("n", {"n": 2}),
    ("min_tokens", {"max_tokens": 4, "extra_body": {"min_tokens": 8}}),
]


@pytest.mark.parametrize("stream", [False, True], ids=["unstreamed", "streamed"])
@pytest.mark.parametrize("param,kwargs", BAD_REQUESTS, ids=[p for p, _ in BAD_REQUESTS])
def test_bad_request(target, param, kwargs, stream):
    client = target.client()
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=target.model, messages=user(words("bad", 4)), stream=stream, **kwargs)
    check_error(info.value, 400, "BadRequestError", param)
    assert re.search(rf"\b{param}\b", info.value.body["message"])
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=target.model, prompt=words("bad", 4), stream=stream, **kwargs)
    check_error(info.value, 400, "BadRequestError", param)


def test_stream_options_without_stream(target):
    with pytest.raises(openai.BadRequestError) as info:
        target.client().chat.completions.create(
            model=target.model, messages=user("hi"), max_tokens=4, stream_options={"include_usage": True})
    check_error(info.value, 400, "BadRequestError", "stream_options")


# --- request ids -----------------------------------------------------------------------


def test_request_id(target):
    """A client's X-Request-Id names the request in the engine (the response id) and, through
    the gateway, comes back as a header, which the SDK exposes as _request_id."""
    client = target.client()
    rid = f"e2e-{RUN_TAG}-rid"
    raw = client.chat.completions.with_raw_response.create(
        model=target.model, messages=user(words("rid", 5)), max_tokens=2, extra_headers={"X-Request-Id": rid})
    res = raw.parse()
    assert res.id == "chatcmpl-" + rid
    if target.gateway:
        assert raw.headers["x-request-id"] == rid
        assert res._request_id == rid
    else:
        # vLLM sends X-Request-Id back only with --enable-request-id-headers; the simulator
        # never does, so the SDK has no request id to show.
        assert "x-request-id" not in raw.headers
        assert res._request_id is None

    stream = client.completions.create(model=target.model, prompt=words("rid", 5), max_tokens=3, stream=True,
                                       extra_headers={"X-Request-Id": rid + "-2"})
    ids = {c.id for c in stream}
    assert ids == {"cmpl-" + rid + "-2"}


def test_gateway_request_id_replaced(gateway):
    """An X-Request-Id the gateway will not pass on (spaces, over 128 characters) is replaced
    by 32 random hex digits, which the engine then uses; so is a missing one."""
    client = gateway.client()
    for headers in ({"X-Request-Id": "not a valid id"}, {"X-Request-Id": "x" * 129}, {}):
        raw = client.chat.completions.with_raw_response.create(
            model=gateway.model, messages=user(words("rid-bad", 5)), max_tokens=2, extra_headers=headers)
        rid = raw.headers["x-request-id"]
        assert HEX32.match(rid), rid
        assert raw.parse().id == "chatcmpl-" + rid


# --- clients that leave -------------------------------------------------------------------


def long_reply(target):
    """A request that would decode 2,000 tokens (4 s at the suite's 2 ms a token)."""
    return dict(model=target.model, max_tokens=2000, extra_body={"ignore_eos": True})


def check_left(target, aborted_before):
    """After a client left: the engines run and queue nothing within a second, and withdrew
    exactly one request."""
    took = target.wait_idle(within=1.0)
    assert took is not None, "the engines still hold the abandoned request 1 s later: %s running, %s waiting" \
        % target.engine_load()
    deadline = time.monotonic() + 1.0
    while target.aborted() != aborted_before + 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert target.aborted() == aborted_before + 1


def test_close_mid_stream(target):
    """Sync: the stream is closed after three chunks, explicitly and by leaving a with block."""
    client = target.client()
    aborted = target.aborted()
    stream = client.chat.completions.create(messages=user(words("close", 8)), stream=True, **long_reply(target))
    for _ in range(3):
        next(stream)
    assert target.engine_load() == (1, 0)
    stream.close()
    check_left(target, aborted)

    aborted = target.aborted()
    with client.completions.create(prompt=words("close-with", 8), stream=True, **long_reply(target)) as stream:
        for _ in range(3):
            next(stream)
        assert target.engine_load() == (1, 0)
    check_left(target, aborted)


def test_async_timeout_mid_stream(target):
    """Async: asyncio.wait_for gives up on a stream that is still going; cancelling the task
    closes the connection."""
    aborted = target.aborted()
    got = []

    async def consume(client):
        stream = await client.chat.completions.create(
            messages=user(words("async-cancel", 8)), stream=True, **long_reply(target))
        async for chunk in stream:
            got.append(chunk)

    async def main():
        async with target.async_client() as client:
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(consume(client), timeout=1.0)

    asyncio.run(main())
    assert len(got) > 3, "the stream had not started when the timeout fired"
    check_left(target, aborted)


def test_client_timeout_before_first_token(target):
    """The SDK's own timeout fires while the engine is still prefilling a long prompt (about
    17,600 tokens, some 2.6 s of simulated prefill): APITimeoutError, and the engine drops the
    request."""
    messages = user(words("timeout", 6000))
    assert target.count_tokens(messages=messages) > 15000
    aborted = target.aborted()
    client = target.client(timeout=1.0)
    start = time.monotonic()
    with pytest.raises(openai.APITimeoutError):
        client.chat.completions.create(model=target.model, messages=messages, max_tokens=4)
    assert time.monotonic() - start < 2.5, "max_retries=0, yet the SDK tried again"
    check_left(target, aborted)


# --- async --------------------------------------------------------------------------------


def test_async_unstreamed(target):
    async def main():
        async with target.async_client() as client:
            chat, completion, models = await asyncio.gather(
                client.chat.completions.create(model=target.model, messages=user(words("async", 6)), max_tokens=6),
                client.completions.create(model=target.model, prompt=words("async", 6), max_tokens=7),
                client.models.list(),
            )
        return chat, completion, models

    chat, completion, models = asyncio.run(main())
    check_usage(chat.usage, prompt=target.count_tokens(messages=user(words("async", 6))), completion=6)
    check_usage(completion.usage, prompt=target.count_tokens(prompt=words("async", 6)), completion=7)
    assert MODEL in [m.id for m in models.data]


def test_async_50_concurrent_streams(target):
    """50 streams at once, half chats and half completions, each with its own prompt and
    length: every one ends with finish_reason length and a usage chunk whose counts are exact;
    through the gateway its headers agree and round robin spreads them evenly."""
    n = 50
    jobs = []
    for i in range(n):
        prompt = words(f"c50-{i}", 5 + i % 7)
        max_tokens = 8 + i % 17
        if i % 2 == 0:
            jobs.append(("chat", prompt, max_tokens, target.count_tokens(messages=user(prompt))))
        else:
            jobs.append(("completion", prompt, max_tokens, target.count_tokens(prompt=prompt)))

    async def one(client, kind, prompt, max_tokens):
        common = dict(model=target.model, max_tokens=max_tokens, stream=True,
                      stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
        if kind == "chat":
            raw = await client.chat.completions.with_raw_response.create(messages=user(prompt), **common)
        else:
            raw = await client.completions.with_raw_response.create(prompt=prompt, **common)
        chunks = [c async for c in raw.parse()]
        return raw.headers, chunks

    async def main():
        async with target.async_client() as client:
            return await asyncio.gather(*(one(client, k, p, m) for k, p, m, _ in jobs))

    results = asyncio.run(main())
    replicas = {}
    for (kind, _, max_tokens, prompt), (headers, chunks) in zip(jobs, results):
        if kind == "chat":
            _, finish, usage, _ = chat_chunks(chunks)
        else:
            _, finish, usage, _ = completion_chunks(chunks)
        assert finish == "length"
        check_usage(usage, prompt=prompt, completion=max_tokens)
        replica = check_headers(target, headers, usage)
        replicas[replica] = replicas.get(replica, 0) + 1
    if target.gateway:
        assert sorted(replicas.values()) == [16, 17, 17], replicas
    assert target.wait_idle(within=1.0) is not None
