"""A pyzmq PUB for the interop tests: binds a loopback port, prints its
endpoint, then publishes vLLM-shaped messages [topic, seq (8 bytes, big
endian), payload] alternately on topics "kv-events" and "other" every
millisecond, until its standard input closes."""
import sys
import threading

import zmq

ctx = zmq.Context()
pub = ctx.socket(zmq.PUB)
pub.setsockopt(zmq.LINGER, 0)
pub.bind("tcp://127.0.0.1:0")
print(pub.getsockopt(zmq.LAST_ENDPOINT).decode(), flush=True)
done = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
seq = 0
while not done.wait(0.001):
    topic = b"kv-events" if seq % 2 == 0 else b"other"
    pub.send_multipart([topic, seq.to_bytes(8, "big"), b"payload %d" % seq])
    seq += 1
pub.close()
ctx.term()
