"""The official OpenAI Python SDK against inferrail-gateway with API keys and TLS.

The fixture starts a gateway of its own (from E2E_BIN_DIR, which run.sh builds) in front of
run.sh's three simulators, serving TLS on its client port with a certificate from a throwaway
CA (inferrail-bench testcerts), and API keys made with `inferrail-gateway keygen`, as an operator would. The tests:
a key is accepted over TLS, sync and async, streamed and not; a wrong, missing or malformed
key gets 401 and a key without the model 403, in OpenAI's error shape, and the SDK does not
retry them; a key whose output budget is in debt gets 429 with Retry-After, which the SDK's
own retry honours before it succeeds.
"""

import asyncio
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request

import openai
import pytest

from fleet import ALIAS, MODEL, http_get, words

OTHER_MODEL = "e2e/other"


def bin_dir():
    d = os.environ.get("E2E_BIN_DIR")
    return d or os.path.join(os.path.dirname(__file__), "..", "..", "bin")


def make_certificates(d):
    """A CA and a server certificate for 127.0.0.1 and localhost that it signed, P-256,
    from inferrail-bench testcerts (Go's crypto/x509), so no openssl command is needed."""
    subprocess.run([os.path.join(bin_dir(), "inferrail-bench"), "testcerts", "--dir", str(d)],
                   check=True, capture_output=True)
    return os.path.join(d, "ca.pem"), os.path.join(d, "server.crt"), os.path.join(d, "server.key")


def keygen(*args):
    """Runs inferrail-gateway keygen; returns the secret and the entry it printed."""
    out = subprocess.run([os.path.join(bin_dir(), "inferrail-gateway"), "keygen", *args],
                         check=True, capture_output=True, text=True).stdout
    lines = out.splitlines(keepends=True)
    assert lines[1].startswith("irk-") and lines[2].startswith("#"), out
    return lines[1].strip(), "".join(lines[3:])


class KeyedGateway:
    """An inferrail-gateway with keys and TLS, stopped by stop() whatever happened."""

    def __init__(self, d, replicas):
        self.ca, cert, key = make_certificates(d)
        self.full, full = keygen("--name", "e2e-full")
        self.other, other = keygen("--name", "e2e-other", "--models", OTHER_MODEL)
        self.debt, debt = keygen("--name", "e2e-debt")
        debt = debt.rstrip("\n") + "\n    limits: {output_tokens_per_minute: 60}\n"
        keys = os.path.join(d, "keys.yaml")
        with open(keys, "w") as f:
            f.write("keys:\n" + full + other + debt)
        names = ", ".join([MODEL, OTHER_MODEL])
        reps = "".join(f"  - {{id: {rid}, url: '{url}', models: [{names}]}}\n"
                       for rid, url in replicas.items())
        config = os.path.join(d, "gateway.yaml")
        with open(config, "w") as f:
            f.write(f"""server:
  listen: 127.0.0.1:0
  admin_listen: 127.0.0.1:0
  shutdown_timeout: 1s
  tls: {{cert_file: '{cert}', key_file: '{key}'}}
auth:
  keys_file: '{keys}'
models:
  - {{name: {MODEL}, aliases: [{ALIAS}], tokenizer: 'builtin:sim'}}
  - {{name: {OTHER_MODEL}}}
tokenizer:
  verify: false
replicas:
{reps}""")
        argv = [os.path.join(bin_dir(), "inferrail-gateway"), "--config", config]
        if shutil.which("setpriv"):
            argv = ["setpriv", "--pdeathsig", "TERM", "--"] + argv
        self.log_path = os.path.join(d, "gateway.log")
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        try:
            self._wait_ready(len(replicas))
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, n):
        deadline = time.monotonic() + 15
        client = admin = None
        while time.monotonic() < deadline and not client:
            text = open(self.log_path, encoding="utf-8", errors="replace").read()
            m = re.search(r'msg="inferrail-gateway listening" client=(\S+) admin=(\S+)', text)
            if m:
                client, admin = m.group(1), m.group(2)
            elif self.proc.poll() is not None:
                pytest.fail(f"inferrail-gateway exited with {self.proc.returncode}: {text[-2000:]}")
            time.sleep(0.02)
        if not client:
            pytest.fail(f"inferrail-gateway did not listen within 15 s: {self.tail()}")
        self.url, self.admin = "https://" + client, "http://" + admin
        while time.monotonic() < deadline:
            reps = json.loads(http_get(self.admin + "/admin/replicas")[1])["replicas"]
            if len(reps) == n and all(r["healthy"] for r in reps):
                return
            time.sleep(0.05)
        pytest.fail(f"the keyed gateway's replicas were not healthy within 15 s: {self.tail()}")

    def ssl_context(self):
        return ssl.create_default_context(cafile=self.ca)

    def client(self, key, *, retries=0, statuses=None):
        """A sync SDK client over TLS with the test CA; statuses, if given, collects the
        status of every HTTP response, retries included."""
        hooks = {"response": [lambda r: statuses.append((r.status_code, time.monotonic(),
                                                          dict(r.headers)))]} if statuses is not None else {}
        http = openai.DefaultHttpxClient(verify=self.ssl_context(), event_hooks=hooks)
        return openai.OpenAI(base_url=self.url + "/v1", api_key=key, max_retries=retries,
                             timeout=30.0, http_client=http)

    def async_client(self, key):
        http = openai.DefaultAsyncHttpxClient(verify=self.ssl_context())
        return openai.AsyncOpenAI(base_url=self.url + "/v1", api_key=key, max_retries=0,
                                  timeout=30.0, http_client=http)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()

    def tail(self):
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()[-3000:]


@pytest.fixture(scope="module")
def keyed(tmp_path_factory, replicas):
    gw = KeyedGateway(str(tmp_path_factory.mktemp("keyed")), replicas)
    yield gw
    gw.stop()
    assert gw.proc.returncode == 0, f"the keyed gateway exited with {gw.proc.returncode}: {gw.tail()}"


def chat(client, text, max_tokens=4, model=ALIAS, **kw):
    return client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": text}], max_tokens=max_tokens, **kw)


def test_accepted_over_tls(keyed):
    client = keyed.client(keyed.full)
    res = chat(client, words("keyed", 8))
    assert res.choices[0].message.content
    assert res.usage.completion_tokens == 4
    chunks = list(chat(client, words("keyed-stream", 8), stream=True))
    assert any(c.choices and c.choices[0].delta.content for c in chunks)
    models = [m.id for m in client.models.list().data]
    assert models == [MODEL, ALIAS, OTHER_MODEL]


def test_accepted_async(keyed):
    async def main():
        async with keyed.async_client(keyed.full) as client:
            res = await asyncio.gather(*(client.chat.completions.create(
                model=ALIAS, messages=[{"role": "user", "content": words(f"async{i}", 6)}],
                max_tokens=3) for i in range(4)))
            return [r.usage.completion_tokens for r in res]
    assert asyncio.run(main()) == [3, 3, 3, 3]


@pytest.mark.parametrize("key", ["irk-" + "A" * 43, "sk-proj-not-ours"])
def test_wrong_key(keyed, key):
    statuses = []
    with pytest.raises(openai.AuthenticationError) as e:
        chat(keyed.client(key, retries=3, statuses=statuses), "hello")
    assert e.value.status_code == 401
    assert e.value.code == "invalid_api_key" and e.value.type == "invalid_request_error"
    assert key not in e.value.message
    assert [s for s, _, _ in statuses] == [401], "the SDK must not retry a 401"


@pytest.mark.parametrize("header", [None, "Basic dXNlcjpwYXNz", "Bearer a b"])
def test_missing_or_malformed(keyed, header):
    req = urllib.request.Request(keyed.url + "/v1/models")
    if header:
        req.add_header("Authorization", header)
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, context=keyed.ssl_context(), timeout=10)
    assert e.value.code == 401
    assert e.value.headers["WWW-Authenticate"] == 'Bearer realm="inferrail"'
    body = json.loads(e.value.read())
    assert body["error"]["code"] == "invalid_api_key"


def test_model_not_allowed(keyed):
    client = keyed.client(keyed.other)
    with pytest.raises(openai.PermissionDeniedError) as e:
        chat(client, "hello")
    assert e.value.status_code == 403 and e.value.code == "model_not_allowed"
    assert e.value.param == "model"
    assert [m.id for m in client.models.list().data] == [OTHER_MODEL]


def test_rate_limited_then_retried(keyed):
    # 61 output tokens at 60 a minute leave the key a token in debt: the next request, which
    # reserves its 2 output tokens at admission, is refused for about three seconds, and the
    # SDK, told so, waits and succeeds.
    chat(keyed.client(keyed.debt), words("debt", 4), max_tokens=61, extra_body={"ignore_eos": True})
    statuses = []
    res = chat(keyed.client(keyed.debt, retries=2, statuses=statuses), words("after", 4), max_tokens=2)
    assert res.usage.completion_tokens == 2
    assert [s for s, _, _ in statuses] == [429, 200]
    (_, refused_at, headers), (_, ok_at, _) = statuses
    wait_ms = int(headers["retry-after-ms"])
    assert 2000 <= wait_ms <= 3100, headers
    assert int(headers["retry-after"]) == 3
    assert headers["x-ratelimit-limit-tokens"] == "60"
    assert headers["x-ratelimit-remaining-tokens"] == "0"
    assert re.fullmatch(r"[0-9.]+(ms|s)|[0-9]+m[0-9.]+s", headers["x-ratelimit-reset-tokens"])
    # The SDK waited as told (a lower bound: a loaded machine only makes it later).
    assert ok_at - refused_at >= wait_ms / 1000


def test_plain_http_refused(keyed):
    with pytest.raises(urllib.error.HTTPError) as e:
        http_get(keyed.url.replace("https://", "http://") + "/health")
    assert e.value.code == 400
