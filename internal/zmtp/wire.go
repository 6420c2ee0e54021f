package zmtp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Wire constants of ZMTP 3.x (RFC 23 and 37).
const (
	greetingSize = 64
	sigSize      = 10 // the signature: 0xFF, 8 bytes of padding, 0x7F
	majorVersion = 3
	minorVersion = 1 // ZMTP 3.1: what we advertise; 3.0 peers are accepted

	flagMore    = 0x01
	flagLong    = 0x02
	flagCommand = 0x04

	// frameCost is what each frame counts against the maximum message size
	// on top of its body: without it a peer could send an endless message of
	// empty frames and grow the slice of frames without bound.
	frameCost = 32

	// bodyChunk is the largest buffer allocated for a frame body before its
	// bytes have arrived; bigger bodies grow as they are read, so a header
	// that lies about its size costs the liar its own bandwidth, not our memory.
	bodyChunk = 64 << 10
)

// Errors a peer's bytes can cause. Each closes that peer's connection only.
var (
	ErrSignature  = errors.New("zmtp: peer's greeting lacks the ZMTP signature")
	ErrVersion    = errors.New("zmtp: peer speaks a ZMTP version older than 3.0")
	ErrMechanism  = errors.New("zmtp: peer asks for a security mechanism other than NULL")
	ErrTooLarge   = errors.New("zmtp: message exceeds the maximum message size")
	ErrFlags      = errors.New("zmtp: frame has reserved or contradictory flags")
	ErrMalformed  = errors.New("zmtp: malformed command")
	ErrSocketType = errors.New("zmtp: incompatible socket types")
)

// compatible lists, per socket type, the peer socket types RFC 23/37 allow.
var compatible = map[string][]string{
	"PUB":    {"SUB", "XSUB"},
	"SUB":    {"PUB", "XPUB"},
	"ROUTER": {"DEALER", "REQ", "ROUTER"},
	"DEALER": {"ROUTER", "REP", "DEALER"},
}

// greeting is the part of a peer's 64-byte greeting that matters to us.
type greeting struct {
	major, minor byte
	mechanism    string
	asServer     bool
}

// appendGreeting appends our greeting: version 3.minor, NULL, as-server 0.
func appendGreeting(dst []byte, minor byte) []byte {
	var g [greetingSize]byte
	g[0], g[9] = 0xFF, 0x7F
	g[10], g[11] = majorVersion, minor
	copy(g[12:32], "NULL")
	return append(dst, g[:]...)
}

// checkSignature validates the first 10 bytes, so that garbage is refused
// before we wait for the remaining 54.
func checkSignature(b []byte) error {
	if len(b) < sigSize || b[0] != 0xFF || b[9]&1 != 1 {
		return ErrSignature
	}
	return nil
}

// parseGreeting validates a whole greeting and returns what it says.
func parseGreeting(b []byte) (greeting, error) {
	if len(b) != greetingSize {
		return greeting{}, fmt.Errorf("zmtp: greeting of %d bytes: %w", len(b), io.ErrUnexpectedEOF)
	}
	if err := checkSignature(b); err != nil {
		return greeting{}, err
	}
	g := greeting{major: b[10], minor: b[11], asServer: b[32] == 1}
	if g.major < majorVersion {
		return g, ErrVersion
	}
	if g.major > majorVersion {
		g.major, g.minor = majorVersion, minorVersion // a newer peer downgrades to us
	}
	g.mechanism = string(bytes.TrimRight(b[12:32], "\x00"))
	if g.mechanism != "NULL" {
		return g, fmt.Errorf("%w (%q)", ErrMechanism, g.mechanism)
	}
	return g, nil
}

// readGreeting reads and validates a peer's greeting.
func readGreeting(r io.Reader) (greeting, error) {
	var b [greetingSize]byte
	if _, err := io.ReadFull(r, b[:sigSize]); err != nil {
		return greeting{}, truncated(err)
	}
	if err := checkSignature(b[:sigSize]); err != nil {
		return greeting{}, err
	}
	if _, err := io.ReadFull(r, b[sigSize:]); err != nil {
		return greeting{}, truncated(err)
	}
	return parseGreeting(b[:])
}

// truncated turns an end of stream inside a unit into io.ErrUnexpectedEOF.
func truncated(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// appendFrameHeader appends a frame header: flags and a 1- or 8-byte size.
func appendFrameHeader(dst []byte, flags byte, size int) []byte {
	if size > 255 {
		dst = append(dst, flags|flagLong)
		return binary.BigEndian.AppendUint64(dst, uint64(size))
	}
	return append(dst, flags, byte(size))
}

// appendMessage appends a multipart message, MORE set on all but the last frame.
func appendMessage(dst []byte, frames [][]byte) []byte {
	for i, f := range frames {
		var flags byte
		if i < len(frames)-1 {
			flags = flagMore
		}
		dst = appendFrameHeader(dst, flags, len(f))
		dst = append(dst, f...)
	}
	return dst
}

// appendCommand appends a command frame: name length, name, data.
func appendCommand(dst []byte, name string, data []byte) []byte {
	dst = appendFrameHeader(dst, flagCommand, 1+len(name)+len(data))
	dst = append(dst, byte(len(name)))
	dst = append(dst, name...)
	return append(dst, data...)
}

// property is one READY metadata entry.
type property struct {
	name  string
	value []byte
}

// appendReady appends a READY command with the given properties.
func appendReady(dst []byte, props ...property) []byte {
	var data []byte
	for _, p := range props {
		data = append(data, byte(len(p.name)))
		data = append(data, p.name...)
		data = binary.BigEndian.AppendUint32(data, uint32(len(p.value)))
		data = append(data, p.value...)
	}
	return appendCommand(dst, "READY", data)
}

// appendError appends an ERROR command; reasons are cut to 255 bytes.
func appendError(dst []byte, reason string) []byte {
	if len(reason) > 255 {
		reason = reason[:255]
	}
	return appendCommand(dst, "ERROR", append([]byte{byte(len(reason))}, reason...))
}

// command is a parsed command frame.
type command struct {
	name string
	data []byte
}

// parseCommand splits a command frame's body into name and data.
func parseCommand(body []byte) (command, error) {
	if len(body) < 1 || int(body[0]) > len(body)-1 || body[0] == 0 {
		return command{}, ErrMalformed
	}
	n := int(body[0])
	return command{name: string(body[1 : 1+n]), data: body[1+n:]}, nil
}

// parseProperties parses READY metadata. Names compare case-insensitively
// (RFC 23), so they are returned in canonical lower case.
func parseProperties(data []byte) (map[string][]byte, error) {
	props := map[string][]byte{}
	for len(data) > 0 {
		n := int(data[0])
		if n == 0 || len(data) < 1+n+4 {
			return nil, fmt.Errorf("%w: READY property", ErrMalformed)
		}
		name := strings.ToLower(string(data[1 : 1+n]))
		data = data[1+n:]
		vlen := binary.BigEndian.Uint32(data)
		data = data[4:]
		if uint64(vlen) > uint64(len(data)) {
			return nil, fmt.Errorf("%w: READY property %q", ErrMalformed, name)
		}
		props[name] = data[:vlen]
		data = data[vlen:]
	}
	return props, nil
}

// parseError returns the reason an ERROR command gives.
func parseError(data []byte) string {
	if len(data) == 0 {
		return ""
	}
	n := min(int(data[0]), len(data)-1)
	return string(data[1 : 1+n])
}

// peerInfo is what a finished handshake tells about the peer.
type peerInfo struct {
	minor      byte   // negotiated minor version: 0 or 1
	socketType string // the peer's Socket-Type property
	identity   []byte // the peer's Identity property, possibly empty
}

// readReady reads the peer's READY (or ERROR) command and checks that its
// socket type may talk to ours.
func readReady(fr *frameReader, self string) (peerInfo, error) {
	msg, cmd, err := fr.next()
	if err != nil {
		return peerInfo{}, truncated(err)
	}
	if msg != nil {
		return peerInfo{}, fmt.Errorf("%w: message before READY", ErrMalformed)
	}
	switch cmd.name {
	case "READY":
	case "ERROR":
		return peerInfo{}, fmt.Errorf("zmtp: peer refused the handshake: %q", parseError(cmd.data))
	default:
		return peerInfo{}, fmt.Errorf("%w: %q before READY", ErrMalformed, cmd.name)
	}
	props, err := parseProperties(cmd.data)
	if err != nil {
		return peerInfo{}, err
	}
	info := peerInfo{socketType: string(props["socket-type"]), identity: props["identity"]}
	for _, t := range compatible[self] {
		if t == info.socketType {
			return info, nil
		}
	}
	return info, fmt.Errorf("%w: %s and %q", ErrSocketType, self, info.socketType)
}

// frameReader reads messages and commands, never accepting more than max
// bytes (frames counted at body size plus frameCost) for one of them.
type frameReader struct {
	r   io.Reader
	max int64
	hdr [9]byte
}

// next returns the next complete multipart message, or the next command.
// A clean end of stream between messages is io.EOF; anything else that stops
// it early is an error wrapping io.ErrUnexpectedEOF or one of the Err values.
func (fr *frameReader) next() ([][]byte, *command, error) {
	budget := fr.max
	var msg [][]byte
	for {
		flags, size, err := fr.header()
		if err != nil {
			if len(msg) > 0 {
				err = truncated(err)
			}
			return nil, nil, err
		}
		if flags&flagCommand != 0 && (flags&flagMore != 0 || len(msg) > 0) {
			return nil, nil, ErrFlags
		}
		if budget < frameCost || size > uint64(budget-frameCost) {
			return nil, nil, ErrTooLarge
		}
		budget -= int64(size) + frameCost
		body, err := readBody(fr.r, int(size))
		if err != nil {
			return nil, nil, err
		}
		if flags&flagCommand != 0 {
			cmd, err := parseCommand(body)
			if err != nil {
				return nil, nil, err
			}
			return nil, &cmd, nil
		}
		msg = append(msg, body)
		if flags&flagMore == 0 {
			return msg, nil, nil
		}
	}
}

// header reads one frame header. io.EOF means no byte of it was there.
func (fr *frameReader) header() (flags byte, size uint64, err error) {
	if _, err := io.ReadFull(fr.r, fr.hdr[:2]); err != nil {
		return 0, 0, err
	}
	flags = fr.hdr[0]
	if flags&^(flagMore|flagLong|flagCommand) != 0 {
		return 0, 0, ErrFlags
	}
	if flags&flagLong == 0 {
		return flags, uint64(fr.hdr[1]), nil
	}
	if _, err := io.ReadFull(fr.r, fr.hdr[2:9]); err != nil {
		return 0, 0, truncated(err)
	}
	return flags, binary.BigEndian.Uint64(fr.hdr[1:9]), nil
}

// readBody reads n bytes, allocating at most bodyChunk ahead of the data.
func readBody(r io.Reader, n int) ([]byte, error) {
	b := make([]byte, min(n, bodyChunk))
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, truncated(err)
	}
	for len(b) < n {
		grown := make([]byte, min(n, 2*len(b)))
		copy(grown, b)
		if _, err := io.ReadFull(r, grown[len(b):]); err != nil {
			return nil, truncated(err)
		}
		b = grown
	}
	return b, nil
}
