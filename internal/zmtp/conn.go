package zmtp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"
)

// Defaults of Options' zero fields.
const (
	// DefaultHWM is vLLM's default send high-water mark for its PUB socket.
	DefaultHWM = 100_000
	// DefaultMaxMessageSize bounds one multipart message; a vLLM event batch
	// is kilobytes, so this only stops garbage and hostile peers.
	DefaultMaxMessageSize = 64 << 20
	// DefaultReconnectInterval is libzmq's ZMQ_RECONNECT_IVL default.
	DefaultReconnectInterval = 100 * time.Millisecond
	// DefaultReconnectMax caps the doubling reconnect backoff.
	DefaultReconnectMax = 5 * time.Second
	// DefaultHandshakeTimeout closes connections that never finish the handshake.
	DefaultHandshakeTimeout = 10 * time.Second
)

// ErrClosed is returned by a socket's methods after Close or after the
// context it was made with is done.
var ErrClosed = errors.New("zmtp: socket closed")

// Options tune a socket; the zero value means every default.
type Options struct {
	// HWM is the length, in messages, of each bounded queue: a PUB's or a
	// ROUTER's per-peer send queue, a DEALER's send queue and every receive
	// queue. Each queue is a Go channel, allocated at its full length.
	HWM int
	// MaxMessageSize bounds a received multipart message: the sum of its
	// frames' sizes plus 32 bytes per frame. A peer that exceeds it is
	// disconnected.
	MaxMessageSize int64
	// MaxQueuedBytes bounds every receive queue (a SUB's, a DEALER's, a
	// ROUTER's) in bytes as well, counted as MaxMessageSize is: past it the socket stops
	// reading until its consumer takes a message, as at its HWM, so a peer
	// sending large messages cannot queue HWM of them. A message always
	// queues when nothing else is. Default MaxMessageSize.
	MaxQueuedBytes int64
	// ReconnectInterval is the first wait before a SUB or DEALER reconnects;
	// it doubles after each failed attempt up to ReconnectMax and starts
	// over after a successful handshake.
	ReconnectInterval time.Duration
	// ReconnectMax caps the reconnect backoff.
	ReconnectMax time.Duration
	// HandshakeTimeout bounds the greeting and READY exchange.
	HandshakeTimeout time.Duration
	// Identity is the Identity property a DEALER announces (at most 255
	// bytes, not starting with a zero byte); a ROUTER routes to it by it.
	Identity []byte

	// zmtp30, set by tests, advertises ZMTP 3.0 instead of 3.1, which makes
	// libzmq send subscriptions as messages instead of commands.
	zmtp30 bool
	minor  byte // the ZMTP minor version advertised, from zmtp30
}

// withDefaults fills the zero fields.
func (o Options) withDefaults() Options {
	if o.HWM <= 0 {
		o.HWM = DefaultHWM
	}
	if o.MaxMessageSize <= 0 {
		o.MaxMessageSize = DefaultMaxMessageSize
	}
	if o.MaxQueuedBytes <= 0 {
		o.MaxQueuedBytes = o.MaxMessageSize
	}
	if o.ReconnectInterval <= 0 {
		o.ReconnectInterval = DefaultReconnectInterval
	}
	if o.ReconnectMax < o.ReconnectInterval {
		o.ReconnectMax = max(DefaultReconnectMax, o.ReconnectInterval)
	}
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = DefaultHandshakeTimeout
	}
	o.minor = minorVersion
	if o.zmtp30 {
		o.minor = 0
	}
	return o
}

// parseEndpoint turns "tcp://host:port" into a host:port address; for a
// bind, "*" means every interface.
func parseEndpoint(endpoint string, bind bool) (string, error) {
	rest, ok := strings.CutPrefix(endpoint, "tcp://")
	if !ok {
		return "", fmt.Errorf("zmtp: endpoint %q: only tcp:// is supported", endpoint)
	}
	host, port, err := net.SplitHostPort(rest)
	if err != nil {
		return "", fmt.Errorf("zmtp: endpoint %q: %w", endpoint, err)
	}
	if host == "*" {
		if !bind {
			return "", fmt.Errorf("zmtp: endpoint %q: cannot connect to *", endpoint)
		}
		host = ""
	}
	if port == "" || (!bind && port == "0") {
		return "", fmt.Errorf("zmtp: endpoint %q: missing port", endpoint)
	}
	return net.JoinHostPort(host, port), nil
}

// conn is one connection after a successful handshake.
type conn struct {
	nc   net.Conn
	fr   frameReader
	peer peerInfo

	wmu sync.Mutex // guards bw and buf: the writer and the reader's PONGs
	bw  *bufio.Writer
	buf []byte
}

// handshake runs the greeting and READY exchange on nc as socket type self,
// bounded by the handshake timeout and by ctx.
func handshake(ctx context.Context, nc net.Conn, self string, o Options) (*conn, error) {
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if err := nc.SetDeadline(time.Now().Add(o.HandshakeTimeout)); err != nil {
		return nil, err
	}
	c := &conn{nc: nc, bw: bufio.NewWriterSize(nc, 64<<10)}
	c.fr = frameReader{r: bufio.NewReaderSize(nc, 64<<10), max: o.MaxMessageSize}
	if _, err := nc.Write(appendGreeting(nil, o.minor)); err != nil {
		return nil, err
	}
	g, err := readGreeting(c.fr.r)
	if err != nil {
		return nil, err
	}
	props := []property{{"Socket-Type", []byte(self)}}
	if len(o.Identity) > 0 {
		props = append(props, property{"Identity", o.Identity})
	}
	if _, err := nc.Write(appendReady(nil, props...)); err != nil {
		return nil, err
	}
	c.peer, err = readReady(&c.fr, self)
	if err != nil {
		if errors.Is(err, ErrSocketType) {
			nc.Write(appendError(nil, "invalid socket type"))
		}
		return nil, err
	}
	c.peer.minor = min(g.minor, o.minor)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return c, nc.SetDeadline(time.Time{})
}

// send writes a message into the buffer; flush sends it.
func (c *conn) send(frames [][]byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.buf = appendMessage(c.buf[:0], frames)
	_, err := c.bw.Write(c.buf)
	return err
}

// sendCommand writes a command and flushes it.
func (c *conn) sendCommand(name string, data []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.buf = appendCommand(c.buf[:0], name, data)
	if _, err := c.bw.Write(c.buf); err != nil {
		return err
	}
	return c.bw.Flush()
}

func (c *conn) flush() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.bw.Flush()
}

// pong answers a ZMTP 3.1 PING (heartbeats are libzmq's opt-in; answering
// costs nothing and keeps a heartbeating peer from timing us out).
func (c *conn) pong(ping []byte) error {
	if len(ping) < 2 {
		return fmt.Errorf("%w: PING", ErrMalformed)
	}
	ctx := ping[2:]
	if len(ctx) > 16 {
		ctx = ctx[:16]
	}
	return c.sendCommand("PONG", ctx)
}

// readMessages passes each message to deliver until either fails; it
// answers PINGs and ignores other commands.
func (c *conn) readMessages(deliver func([][]byte) error) error {
	for {
		msg, cmd, err := c.fr.next()
		if err != nil {
			return err
		}
		switch {
		case cmd == nil:
			err = deliver(msg)
		case cmd.name == "PING":
			err = c.pong(cmd.data)
		}
		if err != nil {
			return err
		}
	}
}

// writeLoop sends the messages of q, flushing whenever q runs dry so that a
// burst costs one write system call rather than one per message.
func (c *conn) writeLoop(ctx context.Context, q <-chan [][]byte) error {
	for {
		var m [][]byte
		select {
		case <-ctx.Done():
			return ctx.Err()
		case m = <-q:
		}
		for m != nil {
			if err := c.send(m); err != nil {
				return err
			}
			select {
			case m = <-q:
			default:
				m = nil
			}
		}
		if err := c.flush(); err != nil {
			return err
		}
	}
}

// run runs read in a new goroutine and write (if any) in this one until
// either fails or ctx is done, then closes the connection and waits for both.
func (c *conn) run(ctx context.Context, read, write func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { c.nc.Close() })
	defer stop()
	rerr := make(chan error, 1)
	go func() {
		err := read(ctx)
		cancel()
		rerr <- err
	}()
	var err error
	if write != nil {
		err = write(ctx)
		cancel()
	}
	if e := <-rerr; err == nil || errors.Is(err, context.Canceled) {
		err = e
	}
	c.nc.Close()
	return err
}

// base is what every socket has: its lifetime and its goroutines.
type base struct {
	opts   Options
	self   string
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
	ln     net.Listener // for bound sockets
}

func newBase(ctx context.Context, self string, o Options) *base {
	b := &base{opts: o.withDefaults(), self: self}
	b.ctx, b.cancel = context.WithCancel(ctx)
	return b
}

// Close disconnects every peer and stops every goroutine of the socket,
// waiting for them.
func (b *base) Close() error {
	b.once.Do(func() {
		b.cancel()
		if b.ln != nil {
			b.ln.Close()
		}
	})
	b.wg.Wait()
	return nil
}

// listener is a base that binds (PUB, ROUTER): it has an address.
type listener struct{ *base }

// Addr is the bound address, with the port the kernel picked for port 0.
func (l listener) Addr() net.Addr { return l.ln.Addr() }

// Endpoint is Addr in ZeroMQ's form, for a peer to connect to.
func (l listener) Endpoint() string { return "tcp://" + l.ln.Addr().String() }

// listen binds endpoint and serves each accepted connection that completes
// the handshake with serve, in its own goroutine, until the socket closes.
func (b *base) listen(endpoint string, serve func(*conn), rejected func(error)) error {
	addr, err := parseEndpoint(endpoint, true)
	if err != nil {
		return err
	}
	var lc net.ListenConfig
	b.ln, err = lc.Listen(b.ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("zmtp: bind %s: %w", endpoint, err)
	}
	context.AfterFunc(b.ctx, func() { b.ln.Close() })
	b.wg.Go(func() {
		for {
			nc, err := b.ln.Accept()
			if err != nil {
				if b.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
					return
				}
				sleep(b.ctx, 10*time.Millisecond) // e.g. out of file descriptors
				continue
			}
			b.wg.Go(func() {
				c, err := handshake(b.ctx, nc, b.self, b.opts)
				if err != nil {
					nc.Close()
					rejected(err)
					return
				}
				serve(c)
			})
		}
	})
	return nil
}

// dial connects to endpoint in a goroutine, serves each connection with
// serve and reconnects with backoff when it ends, until the socket closes.
// rejected, if not nil, hears of each connection whose handshake failed.
func (b *base) dial(endpoint string, serve func(*conn), rejected func(error)) error {
	addr, err := parseEndpoint(endpoint, false)
	if err != nil {
		return err
	}
	b.wg.Go(func() {
		var d net.Dialer
		wait := b.opts.ReconnectInterval
		for b.ctx.Err() == nil {
			if nc, err := d.DialContext(b.ctx, "tcp", addr); err == nil {
				if c, err := handshake(b.ctx, nc, b.self, b.opts); err == nil {
					wait = b.opts.ReconnectInterval
					serve(c)
				} else {
					nc.Close()
					if rejected != nil && b.ctx.Err() == nil {
						rejected(err)
					}
				}
			}
			if !sleep(b.ctx, wait) {
				return
			}
			wait = min(2*wait, b.opts.ReconnectMax)
		}
	})
	return nil
}

// sleep waits for d or until ctx is done; it reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
