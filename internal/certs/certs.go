// Package certs loads the TLS material the gateway serves and dials with
// and reloads it from disk when its files change, without a restart: a
// certificate and its key (Keypair), and a bundle of CA certificates
// (Bundle). Files are checked lazily, at most once an interval, by the
// handshakes that need them, so nothing runs in the background; a
// handshake never waits for another's reload. A change that does not load
// (a certificate written before its key, a truncated file) keeps what is
// in effect and is reported once; the next change is tried again.
//
// Server makes the client port's tls.Config and Dialer the connections to
// engines, both TLS 1.2 at least with Go's default cipher suites.
package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inferrail/inferrail/internal/filewatch"
)

// maxPEMBytes bounds a certificate, key or bundle file.
const maxPEMBytes = 4 << 20

// Report is told the outcome of every load after the first: nil when new
// material took effect, else the error (each distinct error once). name
// is the Keypair's or Bundle's name.
type Report func(name string, err error)

// reloader holds a value built from files and rebuilds it when they
// change.
type reloader[T any] struct {
	name   string
	every  time.Duration
	build  func(data [][]byte) (*T, error)
	report Report
	cur    atomic.Pointer[T]
	next   atomic.Int64 // unix nanoseconds of the next check

	mu      sync.Mutex // held by the one check running
	files   []*filewatch.File
	data    [][]byte // each file's last content read; guarded by mu
	failing string   // the last error reported; guarded by mu
}

func newReloader[T any](name string, every time.Duration, report Report, build func([][]byte) (*T, error), paths ...string) (*reloader[T], error) {
	r := &reloader[T]{name: name, every: every, build: build, report: report, data: make([][]byte, len(paths))}
	for i, p := range paths {
		f := filewatch.New(p, maxPEMBytes)
		data, _, err := f.Poll()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		r.files, r.data[i] = append(r.files, f), data
	}
	v, err := build(r.data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	r.cur.Store(v)
	r.next.Store(time.Now().Add(every).UnixNano())
	return r, nil
}

// get returns the value in effect, checking the files first when the
// interval has passed and no other check is running.
func (r *reloader[T]) get() *T {
	now := time.Now()
	if now.UnixNano() >= r.next.Load() && r.mu.TryLock() {
		r.next.Store(now.Add(r.every).UnixNano())
		r.check()
		r.mu.Unlock()
	}
	return r.cur.Load()
}

// check rereads changed files and rebuilds the value. Guarded by mu.
func (r *reloader[T]) check() {
	changed := false
	var errs []error
	for i, f := range r.files {
		data, ch, err := f.Poll()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ch {
			r.data[i], changed = data, true
		}
	}
	var v *T
	err := errors.Join(errs...)
	if err == nil && !changed {
		return
	}
	if err == nil {
		v, err = r.build(r.data)
	}
	if err != nil {
		if msg := err.Error(); msg != r.failing {
			r.failing = msg
			if r.report != nil {
				r.report(r.name, err)
			}
		}
		return
	}
	r.failing = ""
	r.cur.Store(v)
	if r.report != nil {
		r.report(r.name, nil)
	}
}

// Keypair is a certificate chain and its private key, from two PEM files.
// Safe for concurrent use.
type Keypair struct{ r *reloader[tls.Certificate] }

// LoadKeypair reads the pair, which must be good, and rereads it when
// either file changes, checking at most every interval.
func LoadKeypair(name, certFile, keyFile string, every time.Duration, report Report) (*Keypair, error) {
	r, err := newReloader(name, every, report, func(d [][]byte) (*tls.Certificate, error) {
		c, err := tls.X509KeyPair(d[0], d[1])
		if err != nil {
			return nil, err
		}
		return &c, nil
	}, certFile, keyFile)
	if err != nil {
		return nil, err
	}
	return &Keypair{r}, nil
}

// Certificate returns the pair in effect.
func (k *Keypair) Certificate() *tls.Certificate { return k.r.get() }

// NotAfter returns when the certificate in effect expires.
func (k *Keypair) NotAfter() time.Time { return k.r.cur.Load().Leaf.NotAfter }

// Dated says what is wrong with the dates of the certificate in effect at
// now: expired, or not valid yet; "" when it is valid. Clients refuse a
// certificate outside its dates, so the gateway says so where it loads one.
func (k *Keypair) Dated(now time.Time) string {
	leaf := k.r.cur.Load().Leaf
	switch {
	case now.After(leaf.NotAfter):
		return "expired at " + leaf.NotAfter.UTC().Format(time.RFC3339)
	case now.Before(leaf.NotBefore):
		return "not valid until " + leaf.NotBefore.UTC().Format(time.RFC3339)
	}
	return ""
}

// Bundle is a set of CA certificates from one PEM file. Safe for
// concurrent use.
type Bundle struct{ r *reloader[x509.CertPool] }

// LoadBundle reads the bundle, which must hold a certificate, and rereads
// it when the file changes, checking at most every interval.
func LoadBundle(name, file string, every time.Duration, report Report) (*Bundle, error) {
	r, err := newReloader(name, every, report, func(d [][]byte) (*x509.CertPool, error) {
		p := x509.NewCertPool()
		if !p.AppendCertsFromPEM(d[0]) {
			return nil, errors.New("no PEM certificate in the file")
		}
		return p, nil
	}, file)
	if err != nil {
		return nil, err
	}
	return &Bundle{r}, nil
}

// Pool returns the certificates in effect.
func (b *Bundle) Pool() *x509.CertPool { return b.r.get() }
