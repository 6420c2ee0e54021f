"""A pyzmq DEALER for the interop tests, asking a vLLM-style replay ROUTER
at argv[1] for batches from sequence argv[2] the way a DEALER client must:
it sends ["", start_seq] and reads ["", topic, seq, payload]... up to the
end marker ["", "", ff x 8, ""]. Prints "seq <n> <topic> <payload>" per
batch and "end" at the marker."""
import sys

import zmq

END_SEQ = (-1).to_bytes(8, "big", signed=True)
endpoint, start = sys.argv[1], int(sys.argv[2])
ctx = zmq.Context()
dealer = ctx.socket(zmq.DEALER)
dealer.setsockopt(zmq.RCVTIMEO, 10000)
dealer.setsockopt(zmq.LINGER, 0)
dealer.connect(endpoint)
dealer.send_multipart([b"", start.to_bytes(8, "big")])
while True:
    empty, topic, seq, payload = dealer.recv_multipart()
    assert empty == b"", empty
    if seq == END_SEQ:
        assert topic == b"" and payload == b"", (topic, payload)
        print("end", flush=True)
        break
    print("seq", int.from_bytes(seq, "big"), topic.decode(), payload.decode(), flush=True)
dealer.close()
ctx.term()
