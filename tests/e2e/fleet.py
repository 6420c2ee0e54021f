"""The servers under test, and how the tests read them besides the SDK.

A Target is somewhere the SDK sends requests (the lone simulator, or the gateway) together
with the engines that answer them, whose /tokenize and /metrics pages the tests read to check
what the SDK reports. Everything here is standard library plus the SDK.
"""

import json
import re
import time
import urllib.request
import uuid
from dataclasses import dataclass, field

import openai

MODEL = "inferrail/sim-8b"
ALIAS = "sim"
BLOCK_SIZE = 16

# A fresh tag per run keeps prompts apart from those of any earlier run against the same
# servers (run.sh starts new ones, but a developer may point the suite at their own).
RUN_TAG = uuid.uuid4().hex[:8]


@dataclass
class Target:
    """Somewhere the SDK can send requests, and the engines behind it."""

    name: str  # "sim" or "gateway"
    url: str  # base URL, without /v1
    model: str  # the model name clients ask for: the alias through the gateway
    engines: dict = field(default_factory=dict)  # replica id -> engine base URL

    @property
    def gateway(self):
        return self.name == "gateway"

    def client(self, timeout=30.0, **kw):
        """A sync client that never retries, so every failure shows as it happened."""
        return openai.OpenAI(base_url=self.url + "/v1", api_key="e2e", max_retries=0,
                             timeout=timeout, **kw)

    def async_client(self, timeout=60.0, **kw):
        """An async client that never retries."""
        return openai.AsyncOpenAI(base_url=self.url + "/v1", api_key="e2e", max_retries=0,
                                  timeout=timeout, **kw)

    def count_tokens(self, *, messages=None, prompt=None):
        """The prompt's token count as an engine's /tokenize reports it."""
        body = {"model": MODEL}
        if messages is not None:
            body["messages"] = messages
        else:
            body["prompt"] = prompt
        url = next(iter(self.engines.values())) + "/tokenize"
        return http_post_json(url, body)["count"]

    def engine_metric(self, name, **labels):
        """The sum over the engines of every sample of a metric carrying the given labels."""
        return sum(metric_sum(http_get(url + "/metrics")[1], name, **labels)
                   for url in self.engines.values())

    def engine_load(self):
        """Requests running and waiting, summed over the engines."""
        running = waiting = 0.0
        for url in self.engines.values():
            page = http_get(url + "/metrics")[1]
            running += metric_sum(page, "vllm:num_requests_running")
            waiting += metric_sum(page, "vllm:num_requests_waiting")
        return running, waiting

    def aborted(self):
        """Requests the engines withdrew because their client left."""
        return self.engine_metric("vllm:request_success_total", finished_reason="abort")

    def wait_idle(self, within=1.0):
        """Waits until the engines run and queue nothing; returns how long that took, or
        None if it took longer than `within` seconds."""
        start = time.monotonic()
        while True:
            running, waiting = self.engine_load()
            took = time.monotonic() - start
            if running == 0 and waiting == 0:
                return took
            if took > within:
                return None
            time.sleep(0.01)


def http_get(url, timeout=2.0):
    with urllib.request.urlopen(url, timeout=timeout) as res:
        return res.status, res.read().decode()


def http_post_json(url, body, timeout=5.0):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as res:
        return json.loads(res.read())


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})? (\S+)$")


def metric_sum(page, name, **labels):
    """The sum of the samples of the named metric on a Prometheus text page that carry every
    given label; KeyError when the page has no sample of it at all."""
    want = [f'{k}="{v}"' for k, v in labels.items()]
    total, seen = 0.0, False
    for line in page.splitlines():
        m = _SAMPLE.match(line)
        if not m or m.group(1) != name:
            continue
        seen = True
        have = (m.group(2) or "").split(",")
        if all(w in have for w in want):
            total += float(m.group(3))
    if not seen:
        raise KeyError(f"{name} is not on the page")
    return total


def words(tag, n):
    """A prompt of n words that starts with a tag unique to this run and to `tag`, so no two
    requests share a cached prefix unless they use the same tag."""
    vocab = ["engine", "block", "cache", "token", "prefill", "decode", "batch", "queue",
             "router", "replica", "latency", "budget", "stream", "prompt", "kernel", "tensor"]
    out = [f"{RUN_TAG}-{tag}"]
    for i in range(n - 1):
        w = vocab[(i * 7 + len(tag)) % len(vocab)]
        out.append(w + str(i) if i % 5 == 4 else w)
    return " ".join(out)


def user(prompt):
    """A chat of one user message."""
    return [{"role": "user", "content": prompt}]
