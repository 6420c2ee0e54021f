"""inferrail-sim's KV cache events, read with the real pyzmq and decoded with the real msgspec.

Each fixture here starts its own inferrail-sim (from E2E_BIN_DIR, which run.sh builds) with
--kv-events-config on ports the kernel picks (tcp://*:0, read back from its log), subscribes
before any traffic, sends chat requests through the OpenAI SDK, resets the prefix cache once
idle, asks the replay socket for everything from sequence 0, and stops the simulator. The
tests then hold what arrived to vLLM's wire format (vllm-spec.md §3):

  * every message is [topic, 8-byte big-endian sequence, payload], sequences 0, 1, 2, ...;
  * every payload decodes strictly with msgspec into structs declared as vLLM (or SGLang)
    declares them, and msgspec re-encodes the result to the very same bytes;
  * the events make sense: block sizes and token counts, chains of parents that are stored
    and not yet removed, removals of stored blocks only, medium GPU, rank 0, a clear on reset,
    a cache_salt in the first block's extra keys;
  * the block hashes are those vLLM computes (PYTHONHASHSEED=0, sha256 of the pickled
    (parent, tokens, extra_keys)), as 64-bit ints by default and 32-byte digests with
    VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0;
  * replay sends every batch again, byte for byte, then vLLM's end marker.

The structs are scripts/goldens/kvstructs.py's, which the Go codec's goldens are encoded with:
vLLM's vllm/distributed/kv_events.py field for field (and SGLang's
python/sglang/srt/disaggregation/kv_events.py).
"""

import hashlib
import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import msgspec
import pytest
import zmq
from zmq.utils.monitor import recv_monitor_message

from fleet import BLOCK_SIZE, MODEL, Target, http_get, http_post_json, words

# The engines' structs, shared with the goldens of the Go codec.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts",
                                "goldens"))
import kvstructs  # noqa: E402

TOPIC = b"kv"
END_SEQ = b"\xff" * 8
SALT = "e2e-salt"
SALTED_MAX_TOKENS = 40


# --- vLLM's block hash (vllm/utils/hashing.py, vllm/v1/core/kv_cache_utils.py) ---------------

def sha256_pickle(obj):
    return hashlib.sha256(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)).digest()


NONE_HASH = sha256_pickle("0")  # PYTHONHASHSEED=0


def event_int(digest):
    return int.from_bytes(digest, "big") & (2**64 - 1)


def test_hash_vectors():
    """This interpreter's pickle gives vllm-spec.md §4.3's sha256 vectors, so the parity
    checks below compare with what vLLM computes."""
    assert NONE_HASH.hex() == "1973e23848344dc43a988a9b478663803cfffe1243480253f9a3cf004b14aa7c"
    h1 = sha256_pickle((NONE_HASH, tuple(range(1, 17)), None))
    assert event_int(h1) == 7536218907325174565
    h2 = sha256_pickle((h1, tuple(range(17, 33)), None))
    assert event_int(h2) == 9048537298590080561


# --- one simulator with KV events, and what it published --------------------------------------

@dataclass
class Recording:
    """What one simulator published during a workload."""

    encoding: str
    messages: list = field(default_factory=list)  # live [topic, seq, payload]
    replay: list = field(default_factory=list)  # [b"", topic, seq, payload] from the replay socket
    replay_end: list = None  # the last replay message
    salted_prompt: list = None  # the chat sent with cache_salt
    salted_tokens: int = 0  # its prompt's length, as /tokenize counts it
    reset_ok: bool = False


def bin_dir():
    d = os.environ.get("E2E_BIN_DIR")
    if d:
        return d
    return os.path.join(os.path.dirname(__file__), "..", "..", "bin")


class KVSim:
    """An inferrail-sim publishing KV events, stopped by stop() whatever happened."""

    def __init__(self, log_path, *, encoding, env=None, args=()):
        exe = os.path.join(bin_dir(), "inferrail-sim")
        if not os.access(exe, os.X_OK):
            pytest.fail(f"{exe} is missing: run the suite with tests/e2e/run.sh")
        cfg = ('{"enable_kv_cache_events":true,"endpoint":"tcp://*:0",'
               '"replay_endpoint":"tcp://*:0","topic":"kv"}')
        argv = [exe, "--host", "127.0.0.1", "--port", "0", "--zero-latency",
                "--num-gpu-blocks-override", "128", "--max-model-len", "1024",
                "--kv-events-config", cfg, "--kv-events-encoding", encoding, *args]
        # As run.sh does: the simulator gets SIGTERM should pytest die outright.
        if shutil.which("setpriv"):
            argv = ["setpriv", "--pdeathsig", "TERM", "--"] + argv
        full_env = dict(os.environ, PYTHONHASHSEED="0")
        full_env.pop("VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES", None)
        full_env.update(env or {})
        self.log_path = log_path
        self.log = open(log_path, "wb")
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT,
                                     env=full_env, stdin=subprocess.DEVNULL)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self):
        deadline = time.monotonic() + 15
        listen = events = None
        while time.monotonic() < deadline:
            text = open(self.log_path, encoding="utf-8", errors="replace").read()
            m = re.search(r'msg="inferrail-sim listening" addr=(\S+)', text)
            listen = m and m.group(1)
            m = re.search(r'msg="publishing KV events" endpoint=tcp://\S*:(\d+) replay=\S*:(\d+)',
                          text)
            events = m and (int(m.group(1)), int(m.group(2)))
            if listen and events:
                break
            if self.proc.poll() is not None:
                pytest.fail(f"inferrail-sim exited with {self.proc.returncode}: {text[-2000:]}")
            time.sleep(0.02)
        else:
            pytest.fail(f"inferrail-sim did not listen within 15 s: {text[-2000:]}")
        self.url = "http://" + listen
        self.pub = f"tcp://127.0.0.1:{events[0]}"
        self.replay = f"tcp://127.0.0.1:{events[1]}"
        while http_get(self.url + "/health")[0] != 200:
            time.sleep(0.02)

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


def subscribe(ctx, endpoint):
    """A SUB socket on the topic, returned once its connection's handshake is done (after
    which libzmq sends the subscription at once)."""
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.RCVHWM, 0)
    sub.setsockopt(zmq.SUBSCRIBE, TOPIC)
    mon = sub.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)
    try:
        sub.connect(endpoint)
        if not mon.poll(5000):
            pytest.fail(f"no ZMTP handshake with {endpoint} within 5 s")
        assert recv_monitor_message(mon)["event"] == zmq.EVENT_HANDSHAKE_SUCCEEDED
    finally:
        sub.disable_monitor()
        mon.close(linger=0)
    time.sleep(0.1)  # the publisher reads the subscription right after the handshake
    return sub


def recv_until(sock, done, timeout=10.0):
    """Messages from sock until done(message) holds for one; fails after timeout seconds
    without it."""
    out = []
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not sock.poll(int(left * 1000) + 1):
            pytest.fail(f"timed out after {len(out)} messages")
        msg = sock.recv_multipart()
        out.append(msg)
        if done(msg):
            return out


def reset_prefix_cache(url):
    req = urllib.request.Request(url + "/reset_prefix_cache", data=b"", method="POST")
    with urllib.request.urlopen(req, timeout=5) as res:
        return res.status == 200 and b'"success":true' in res.read()


def has_clear(payload):
    # Every encoding writes the tag as a str: msgpack fixstr 0xb0 + "AllBlocksCleared".
    return b"\xb0AllBlocksCleared" in payload


def workload(target, n_chats):
    """n_chats chat requests in four threads: a shared system prompt, a few user prompts each
    asked several times, every fourth streamed, replies long enough to fill blocks; then a
    salted repeat of the first chat and a few long distinct prompts that make the small cache
    evict. Returns the salted chat's messages."""
    system = {"role": "system", "content": words("kv-system", 60)}

    def chat(i):
        messages = [system, {"role": "user", "content": words(f"kv-q{i % 6}", 20 + 7 * (i % 6))}]
        return messages, i % 4 == 0, 40 + (i % 3) * 16

    def send(messages, stream, max_tokens, **extra):
        client = target.client()
        body = {"ignore_eos": True, **extra}
        if stream:
            with client.chat.completions.create(model=MODEL, messages=messages, stream=True,
                                                max_tokens=max_tokens, extra_body=body) as s:
                text = "".join(c.choices[0].delta.content or "" for c in s if c.choices)
        else:
            r = client.chat.completions.create(model=MODEL, messages=messages,
                                               max_tokens=max_tokens, extra_body=body)
            text = r.choices[0].message.content
        assert text

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda i: send(*chat(i)), range(n_chats)))
    salted = chat(0)[0]
    send(salted, True, SALTED_MAX_TOKENS, cache_salt=SALT)
    for i in range(4):
        send([{"role": "user", "content": words(f"kv-long{i}", 130)}], i % 2 == 1, 20)
    return salted


def record(tmp_path_factory, encoding, *, n_chats=30, env=None, args=()):
    """Runs a simulator through the workload and returns what it published."""
    rec = Recording(encoding)
    log = tmp_path_factory.mktemp("kv") / f"sim-{encoding}.log"
    sim = KVSim(log, encoding=encoding, env=env, args=args)
    ctx = zmq.Context()
    try:
        sub = subscribe(ctx, sim.pub)
        target = Target("sim", sim.url, MODEL, {"sim": sim.url})
        # Sequence 0: a reset of the empty cache, which the engine publishes at once.
        assert reset_prefix_cache(sim.url)
        rec.messages += recv_until(sub, lambda m: True, timeout=5)
        rec.salted_prompt = workload(target, n_chats)
        rec.salted_tokens = http_post_json(sim.url + "/tokenize",
                                           {"model": MODEL, "messages": rec.salted_prompt})["count"]
        # Idle at last: the reset must succeed and publish AllBlocksCleared.
        deadline = time.monotonic() + 5
        while not (ok := reset_prefix_cache(sim.url)) and time.monotonic() < deadline:
            time.sleep(0.02)
        rec.reset_ok = ok
        rec.messages += recv_until(sub, lambda m: len(m) == 3 and has_clear(m[2]))
        dealer = ctx.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.connect(sim.replay)
        dealer.send_multipart([b"", (0).to_bytes(8, "big")])
        rec.replay = recv_until(dealer, lambda m: len(m) >= 3 and m[2] == END_SEQ)
        rec.replay_end = rec.replay.pop()
    except BaseException:
        sys.stderr.write(f"--- {log.name} ---\n{sim.tail()}\n")
        raise
    finally:
        ctx.destroy(linger=0)
        sim.stop()
    return rec


@pytest.fixture(scope="module")
def kv_map(tmp_path_factory):
    return record(tmp_path_factory, "map")


@pytest.fixture(scope="module")
def kv_bytes(tmp_path_factory):
    return record(tmp_path_factory, "map", n_chats=8,
                  env={"VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES": "0"})


@pytest.fixture(scope="module")
def kv_array(tmp_path_factory):
    return record(tmp_path_factory, "array", n_chats=8)


@pytest.fixture(scope="module")
def kv_sglang(tmp_path_factory):
    return record(tmp_path_factory, "sglang", n_chats=8)


# A hybrid model's engine: a sliding-window group of 32 tokens beside the full-attention one, in
# a cache that still evicts (the larger --num-gpu-blocks-override holds a request of
# --max-model-len in both groups).
HYBRID_WINDOW = 32


@pytest.fixture(scope="module")
def kv_hybrid(tmp_path_factory):
    return record(tmp_path_factory, "map", n_chats=12,
                  args=["--sliding-window", str(HYBRID_WINDOW), "--num-gpu-blocks-override", "200"])


# --- the checks -------------------------------------------------------------------------------

def check_frames(rec):
    """[topic, seq, payload] each, sequences 0, 1, 2, ... without a gap."""
    assert rec.messages, "nothing published"
    for i, msg in enumerate(rec.messages):
        assert len(msg) == 3, f"message {i} has {len(msg)} frames"
        topic, seq, payload = msg
        assert topic == TOPIC
        assert len(seq) == 8
        assert int.from_bytes(seq, "big") == i, f"message {i} carries sequence {seq.hex()}"
        assert payload


def decode_all(rec, structs):
    """Every payload decoded strictly by msgspec; re-encoding gives the same bytes."""
    dec = msgspec.msgpack.Decoder(structs.Batch)
    enc = msgspec.msgpack.Encoder()
    batches = []
    for topic, seq, payload in rec.messages:
        try:
            batch = dec.decode(payload)
        except msgspec.ValidationError as err:
            pytest.fail(f"batch {int.from_bytes(seq, 'big')}: {err}; payload {payload.hex()}")
        again = enc.encode(batch)
        assert again == payload, (
            f"batch {int.from_bytes(seq, 'big')}: msgspec re-encodes it differently:\n"
            f"sent     {payload.hex()}\nmsgspec  {again.hex()}")
        batches.append(batch)
    return batches


def check_semantics(batches, structs, *, rank_field="data_parallel_rank"):
    """Block sizes, token counts, medium and rank; parents stored and not removed since; only
    stored blocks removed; a clear forgets every block. Returns the events in order."""
    now = time.time()
    cached = Counter()  # hash -> copies in the cache: a hash can be stored twice
    events = []
    for batch in batches:
        assert isinstance(batch.ts, float) and now - 600 < batch.ts <= now + 1
        assert getattr(batch, rank_field) == 0
        assert batch.events, "an empty batch"
        for ev in batch.events:
            events.append(ev)
            if isinstance(ev, structs.Stored):
                assert ev.block_size == BLOCK_SIZE
                assert ev.block_hashes
                assert len(ev.token_ids) == len(ev.block_hashes) * ev.block_size
                assert ev.medium == "GPU"
                assert ev.lora_id is None
                if ev.parent_block_hash is not None:
                    assert cached[ev.parent_block_hash] > 0, \
                        f"parent {ev.parent_block_hash!r} is not in the cache"
                for h in ev.block_hashes:
                    cached[h] += 1
            elif isinstance(ev, structs.Removed):
                assert ev.medium == "GPU"
                assert len(ev.block_hashes) == 1, "vLLM removes one block per event"
                for h in ev.block_hashes:
                    assert cached[h] > 0, f"removed {h!r}, which is not in the cache"
                    cached[h] -= 1
            else:
                assert isinstance(ev, structs.Cleared)
                cached.clear()
    return events


def check_vllm_fields(events, structs, *, locality=True):
    """The fields current vLLM fills in for a single full-attention group."""
    for ev in events:
        if isinstance(ev, structs.Stored):
            assert ev.lora_name is None
            assert ev.extra_keys is not None and len(ev.extra_keys) == len(ev.block_hashes)
            assert ev.group_idx == 0
            assert ev.kv_cache_spec_kind == "full_attention"
            assert ev.kv_cache_spec_sliding_window is None
        elif isinstance(ev, structs.Removed):
            assert ev.group_idx == 0
        if locality and not isinstance(ev, structs.Cleared):
            assert ev.locality is None


def check_hashes(events, structs, *, as_int):
    """Every stored block's hash is vLLM's: sha256 of the pickled (parent digest, tokens,
    extra keys), chained from NONE_HASH; sent as its low 64 bits or as the digest. Returns the
    number of chains checked from their first block."""
    digest_of = {}  # wire hash -> full digest
    roots = 0
    for ev in events:
        if not isinstance(ev, structs.Stored):
            continue
        if ev.parent_block_hash is None:
            parent, roots = NONE_HASH, roots + 1
        else:
            parent = digest_of[ev.parent_block_hash]
        for i, wire in enumerate(ev.block_hashes):
            tokens = tuple(ev.token_ids[i * BLOCK_SIZE:(i + 1) * BLOCK_SIZE])
            extra = ev.extra_keys[i] if ev.extra_keys is not None else None
            digest = sha256_pickle((parent, tokens, extra))
            if as_int:
                assert wire == event_int(digest), f"block {i}: {wire} is not vLLM's hash"
            else:
                assert isinstance(wire, bytes) and len(wire) == 32
                assert wire == digest, f"block {i}: {wire.hex()} is not vLLM's digest"
            digest_of[wire] = digest
            parent = digest
    return roots


def test_kv_frames_and_sequence(kv_map):
    check_frames(kv_map)
    assert len(kv_map.messages) > 20


def test_kv_map_decodes_with_vllm_structs(kv_map):
    decode_all(kv_map, kvstructs.structs("map"))


def test_kv_map_semantics(kv_map):
    s = kvstructs.structs("map")
    events = check_semantics(decode_all(kv_map, s), s)
    check_vllm_fields(events, s)
    kinds = Counter(type(ev).__name__ for ev in events)
    assert kinds["BlockStored"] > 30
    assert kinds["BlockRemoved"] > 0, "the small cache never evicted"
    # Batch 0 is the reset of the empty cache; the last, the reset once idle.
    first, last = decode_all(kv_map, s)[0], decode_all(kv_map, s)[-1]
    assert [type(e) for e in first.events] == [s.Cleared]
    assert kv_map.reset_ok, "/reset_prefix_cache failed with the engine idle"
    assert isinstance(last.events[-1], s.Cleared)
    # A request's later blocks chain on to its earlier ones: some BlockStored has a parent.
    assert any(isinstance(e, s.Stored) and e.parent_block_hash is not None for e in events)
    salted = [e for e in events if isinstance(e, s.Stored) and e.extra_keys
              and e.extra_keys[0] is not None]
    assert len(salted) == 1, f"{len(salted)} stores carry extra keys"
    ev = salted[0]
    assert ev.parent_block_hash is None
    assert ev.extra_keys[0] == (SALT,)
    assert all(k is None for k in ev.extra_keys[1:])
    for e in events:
        if isinstance(e, s.Stored) and e is not ev:
            assert all(k is None for k in e.extra_keys)
    # The salted chain, followed through later stores: every full block of its prompt and of
    # its reply but the last token (which no step computes) is stored, generated ones included.
    chain = list(ev.block_hashes)
    for e in events[events.index(ev) + 1:]:
        if isinstance(e, s.Stored) and e.parent_block_hash == chain[-1]:
            chain += e.block_hashes
    want = (kv_map.salted_tokens + SALTED_MAX_TOKENS - 1) // BLOCK_SIZE
    assert want > kv_map.salted_tokens // BLOCK_SIZE
    assert len(chain) == want, f"{len(chain)} blocks stored for the salted request, want {want}"


def test_kv_map_hashes_are_vllms(kv_map):
    s = kvstructs.structs("map")
    events = check_semantics(decode_all(kv_map, s), s)
    roots = check_hashes(events, s, as_int=True)
    assert roots >= 6
    for e in events:
        if isinstance(e, s.Stored):
            assert all(isinstance(h, int) and 0 <= h < 2**64 for h in e.block_hashes)


def test_kv_bytes_hashes_are_digests(kv_bytes):
    check_frames(kv_bytes)
    s = kvstructs.structs("map")
    events = check_semantics(decode_all(kv_bytes, s), s)
    check_vllm_fields(events, s)
    assert check_hashes(events, s, as_int=False) >= 6
    for e in events:
        if isinstance(e, s.Removed):
            assert all(isinstance(h, bytes) and len(h) == 32 for h in e.block_hashes)


@pytest.mark.parametrize("rec", ["kv_map", "kv_bytes", "kv_array", "kv_sglang", "kv_hybrid"])
def test_kv_replay(rec, request):
    rec = request.getfixturevalue(rec)
    assert rec.replay_end == [b"", b"", END_SEQ, b""]
    assert len(rec.replay) == len(rec.messages)
    for live, again in zip(rec.messages, rec.replay):
        assert again[0] == b"", "replay frames start with the empty delimiter"
        assert again[1:] == live


def test_kv_hybrid_groups(kv_hybrid):
    """A hybrid model's events, its groups numbered as vLLM numbers Gemma 3's and gpt-oss's (the
    window group 0, full attention 1): each group's stores and removals name it, with its kind
    and, for the window, its size; a batch's window stores come before its full-attention ones,
    and store only blocks the full-attention group has stored by the batch's end, under vLLM's
    hashes; the window group gives back and evicts blocks of its own."""
    check_frames(kv_hybrid)
    s = kvstructs.structs("map")
    batches = decode_all(kv_hybrid, s)
    events = check_semantics(batches, s)
    assert check_hashes(events, s, as_int=True) >= 6
    stored = {0: set(), 1: set()}
    removed = Counter()
    for batch in batches:
        window_stored, seen_full = set(), False
        for ev in batch.events:
            if isinstance(ev, s.Stored):
                assert ev.group_idx in (0, 1)
                if ev.group_idx == 0:
                    assert ev.kv_cache_spec_kind == "sliding_window"
                    assert ev.kv_cache_spec_sliding_window == HYBRID_WINDOW
                    window_stored.update(ev.block_hashes)
                else:
                    assert ev.kv_cache_spec_kind == "full_attention"
                    assert ev.kv_cache_spec_sliding_window is None
                    seen_full = True
                stored[ev.group_idx].update(ev.block_hashes)
            elif isinstance(ev, s.Removed):
                assert ev.group_idx in (0, 1)
                removed[ev.group_idx] += 1
        assert window_stored <= stored[1], "a window block the full-attention group never had"
        assert seen_full or not window_stored, "a batch stored window blocks alone"
    assert stored[0], "the window group stored nothing"
    assert removed[0] > 0, "the window group evicted nothing"


def test_kv_array_decodes_with_old_vllm_structs(kv_array):
    check_frames(kv_array)
    s = kvstructs.structs("array")
    events = check_semantics(decode_all(kv_array, s), s)
    check_vllm_fields(events, s, locality=False)
    assert check_hashes(events, s, as_int=True) >= 6
    assert any(isinstance(e, s.Removed) for e in events)


def test_kv_sglang_decodes_with_sglang_structs(kv_sglang):
    check_frames(kv_sglang)
    s = kvstructs.structs("sglang")
    events = check_semantics(decode_all(kv_sglang, s), s, rank_field="attn_dp_rank")
    assert any(isinstance(e, s.Removed) for e in events)
    assert any(isinstance(e, s.Stored) and e.parent_block_hash is not None for e in events)
