"""A pyzmq SUB for the interop tests: connects to argv[1], subscribes to
argv[2], prints each multipart message it gets as one line of hex frames
joined by spaces, and exits after argv[3] messages (or 10 s of silence)."""
import sys

import zmq

endpoint, topic, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
ctx = zmq.Context()
sub = ctx.socket(zmq.SUB)
sub.setsockopt(zmq.RCVTIMEO, 10000)
sub.setsockopt(zmq.LINGER, 0)
sub.setsockopt(zmq.SUBSCRIBE, topic.encode())
sub.connect(endpoint)
for _ in range(count):
    frames = sub.recv_multipart()
    print(" ".join(f.hex() or "-" for f in frames), flush=True)
sub.close()
ctx.term()
