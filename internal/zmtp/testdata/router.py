"""A pyzmq ROUTER for the interop tests, answering like vLLM's replay
socket: binds a loopback port, prints its endpoint, waits for one request
[identity, "", start_seq], replies with three batches [identity, "", topic,
seq, payload] from start_seq and the end marker, then exits."""
import zmq

END_SEQ = (-1).to_bytes(8, "big", signed=True)
ctx = zmq.Context()
router = ctx.socket(zmq.ROUTER)
router.setsockopt(zmq.RCVTIMEO, 10000)
router.setsockopt(zmq.LINGER, 1000)
router.bind("tcp://127.0.0.1:0")
print(router.getsockopt(zmq.LAST_ENDPOINT).decode(), flush=True)
identity, empty, start = router.recv_multipart()
assert empty == b"" and len(start) == 8, (empty, start)
first = int.from_bytes(start, "big")
for seq in range(first, first + 3):
    router.send_multipart([identity, b"", b"kv-events", seq.to_bytes(8, "big"), b"batch %d" % seq])
router.send_multipart([identity, b"", b"", END_SEQ, b""])
print("identity", identity.hex(), flush=True)
router.close()
ctx.term()
