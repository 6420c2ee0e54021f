"""1,000 concurrent streams with the async SDK, through the gateway and straight to one
simulator (make stress, not make test).

run.sh --stress starts three simulators with the default latency model and the gateway with
room for every stream (replica caps 1,024), and a fourth simulator on its own. All streams are
opened at once from one AsyncOpenAI client, first through the gateway, then to the lone
simulator; each asks for its own number of tokens with ignore_eos, so its usage is
known exactly. Every stream must end with a finish_reason and then a usage chunk whose counts
are exact: completion_tokens what it asked for, prompt_tokens what the engine's /tokenize (and,
through the gateway, its x-inferrail-prompt-tokens) say. The wall time, latencies, the spread
over replicas and every error are printed and, with --out, written to sdk-streams.json (through
the gateway) and sdk-streams-direct.json (straight to the simulator).
"""

import asyncio
import datetime
import json
import os
import platform
import statistics
import subprocess
import time

import openai
import pytest

from fleet import user, words

STREAMS = 1000


def _quantile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else None


def _git(*args):
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


@pytest.fixture(params=["gateway", "sim"])
def stress_target(request):
    """The gateway first, then the lone simulator: the order the results were always taken in."""
    return request.getfixturevalue("gateway" if request.param == "gateway" else "solo_sim")


@pytest.mark.stress
def test_1000_concurrent_streams(stress_target):
    gateway = stress_target  # the target, a gateway or a simulator alike
    direct = gateway.name == "sim"
    jobs = []
    for i in range(STREAMS):
        messages = user(words(f"stress-{i}", 4 + i % 13))
        jobs.append((messages, 8 + i % 25, gateway.count_tokens(messages=messages)))

    async def one(client, messages, max_tokens, t0):
        rec = {"ok": False}
        try:
            raw = await client.chat.completions.with_raw_response.create(
                model=gateway.model, messages=messages, max_tokens=max_tokens, stream=True,
                stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
            rec["replica"] = raw.headers.get("x-inferrail-replica")
            rec["header_prompt"] = int(raw.headers.get("x-inferrail-prompt-tokens", -1))
            finish, usage, content_chunks = None, None, 0
            async for chunk in raw.parse():
                if chunk.usage is not None:
                    if usage is not None or chunk.choices:
                        raise AssertionError("a second usage chunk, or one with choices")
                    usage = chunk.usage
                    continue
                if usage is not None:
                    raise AssertionError("a chunk after the usage chunk")
                for c in chunk.choices:
                    if c.delta.content:
                        content_chunks += 1
                        rec.setdefault("ttft", time.monotonic() - t0)
                    if c.finish_reason:
                        if finish is not None:
                            raise AssertionError("two finish_reasons")
                        finish = c.finish_reason
            rec.update(finish=finish, usage=usage and usage.model_dump(), chunks=content_chunks,
                       e2e=time.monotonic() - t0, ok=True)
        except Exception as err:  # every failure is recorded, and the test fails on any
            rec["error"] = f"{type(err).__name__}: {err}"[:300]
        return rec

    async def main():
        # The SDK's default pool (at most 1,000 connections) is used as is, but not its default
        # timeout: its 5 s connect timeout runs out for hundreds of these streams, because one
        # event loop handing 1,000 requests to the pool (httpcore2 scans every connection for
        # each) keeps the CPU too busy to finish the connects. A float sets every phase.
        async with gateway.async_client(timeout=120.0) as client:
            t0 = time.monotonic()
            recs = await asyncio.gather(*(one(client, m, n, t0) for m, n, _ in jobs))
            return recs, time.monotonic() - t0

    idle_before = gateway.wait_idle(within=5.0)
    assert idle_before is not None, "the engines were busy before the run"
    aborted_before = gateway.aborted()
    load_before = os.getloadavg()
    cpu_before = time.process_time()
    recs, wall = asyncio.run(main())
    client_cpu = time.process_time() - cpu_before

    problems = []
    replicas = {}
    for i, ((_, max_tokens, prompt), rec) in enumerate(zip(jobs, recs)):
        if not rec["ok"]:
            problems.append(f"stream {i}: {rec['error']}")
            continue
        u = rec["usage"]
        want = (prompt, max_tokens, prompt + max_tokens)
        if u is None:
            problems.append(f"stream {i}: no usage chunk")
        elif (u["prompt_tokens"], u["completion_tokens"], u["total_tokens"]) != want:
            problems.append(f"stream {i}: usage {u}, want prompt/completion/total {want}")
        elif not direct and rec["header_prompt"] != prompt:
            problems.append(f"stream {i}: x-inferrail-prompt-tokens {rec['header_prompt']}, want {prompt}")
        if rec["finish"] != "length":
            problems.append(f"stream {i}: finish_reason {rec['finish']!r}, want 'length'")
        replicas[rec["replica"]] = replicas.get(rec["replica"], 0) + 1
    idle_after = gateway.wait_idle(within=5.0)
    aborted = gateway.aborted() - aborted_before

    ttft = [r["ttft"] for r in recs if "ttft" in r]
    e2e = [r["e2e"] for r in recs if r["ok"]]
    completion = sum(r["usage"]["completion_tokens"] for r in recs if r["ok"] and r["usage"])
    result = {
        "scenario": "sdk-streams-direct" if direct else "sdk-streams",
        "description": f"{STREAMS} concurrent streamed chats (max_tokens 8-32 with ignore_eos, "
                       "include_usage) opened at once from one openai.AsyncOpenAI client "
                       + ("straight to one simulator with the default latency model (--max-num-seqs 256: "
                          "the rest wait in its queue)" if direct else
                          "through the gateway (round_robin, replica caps 1024) to three simulators with "
                          "the default latency model")
                       + ". Every stream must end with finish_reason length and a usage chunk with exact counts.",
        "command": "tests/e2e/run.sh --stress --out bench/results/python-sdk (make stress)",
        "environment": {
            "git_commit": _git("rev-parse", "HEAD"),
            "git_dirty": bool(_git("status", "--porcelain")),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "python": platform.python_version(),
            "openai": openai.__version__,
            "num_cpu": os.cpu_count(),
            "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in os.getloadavg()],
            "note": "Shared machine; the SDK client, the gateway and the simulators run on the same CPUs.",
        },
        "results": {
            "streams": STREAMS,
            "completed": sum(1 for r in recs if r["ok"]),
            "problems": len(problems),
            "problem_samples": problems[:20],
            "wall_secs": round(wall, 3),
            "streams_per_sec": round(STREAMS / wall, 1),
            "client_cpu_secs": round(client_cpu, 3),
            "completion_tokens": completion,
            "ttft_secs": {"p50": _round(_quantile(ttft, 0.5)), "p99": _round(_quantile(ttft, 0.99)),
                          "max": _round(max(ttft, default=None))},
            "e2e_secs": {"p50": _round(_quantile(e2e, 0.5)), "p99": _round(_quantile(e2e, 0.99)),
                         "max": _round(max(e2e, default=None))},
            "mean_content_chunks_per_stream": _round(statistics.fmean(r["chunks"] for r in recs if r["ok"])) if e2e else None,
            "per_replica": dict(sorted(replicas.items(), key=lambda kv: str(kv[0]))),
            "engine_aborts": aborted,
            "engines_idle_after_secs": _round(idle_after),
        },
    }
    print("\n" + json.dumps(result["results"], indent=2))
    out = os.environ.get("E2E_STRESS_OUT")
    if out:
        with open(os.path.join(out, result["scenario"] + ".json"), "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
    assert not problems, f"{len(problems)} problems, the first: " + "; ".join(problems[:5])
    assert aborted == 0
    assert idle_after is not None, "the engines were still busy 5 s after the last stream"
    assert result["results"]["completed"] == STREAMS


def _round(x):
    return None if x is None else round(x, 4)
