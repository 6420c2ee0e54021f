package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
)

// Auth configures the API keys of the client and admin ports.
type Auth struct {
	// KeysFile is a YAML file of the API keys a client must send as
	// "Authorization: Bearer <key>", stored hashed, each with its name,
	// allowed models, priority class and limits (see package auth for the
	// format; inferrail-gateway keygen makes entries). A relative path is
	// relative to the working directory. Empty, the default: no keys, and
	// anyone who reaches the client port may use it.
	KeysFile string `yaml:"keys_file"`
	// AdminKeysFile is a keys file in the same format for the admin port
	// (metrics included); only names and hashes may be set in it. Empty,
	// the default: the admin port asks for no key, so keep
	// server.admin_listen on loopback (the gateway warns when it is not).
	AdminKeysFile string `yaml:"admin_keys_file"`
	// ReloadInterval is how often the key files are checked for changes;
	// a changed file is reread and, if good, takes effect at once. Must be
	// >= 10ms; default 1s.
	ReloadInterval Duration `yaml:"reload_interval"`
}

// Limits are rate limits per minute, each held in a token bucket that
// holds one minute's worth. 0 means no limit. Each must be between 0 and
// MaxPerMinute.
type Limits struct {
	// RequestsPerMinute limits requests admitted.
	RequestsPerMinute int64 `yaml:"requests_per_minute"`
	// PromptTokensPerMinute limits prompt tokens, counted exactly by the
	// edge tokenizer (estimated at 4 bytes a token for a model without one)
	// and taken when a request is admitted.
	PromptTokensPerMinute int64 `yaml:"prompt_tokens_per_minute"`
	// OutputTokensPerMinute limits generated tokens, charged from the
	// engine's usage when a response ends; a budget in debt admits nothing
	// until it refills.
	OutputTokensPerMinute int64 `yaml:"output_tokens_per_minute"`
}

// MaxPerMinute is the largest rate limit: ten billion a minute.
const MaxPerMinute = 10_000_000_000

// IsZero reports whether l sets no limit.
func (l Limits) IsZero() bool { return l == Limits{} }

// Validate reports every limit out of range, each an *Error whose path is
// prefix + "." + the limit's key.
func (l Limits) Validate(prefix string) error {
	v := &validator{}
	v.rateLimits(prefix, l)
	joined := make([]error, len(v.errs))
	for i, e := range v.errs {
		joined[i] = e
	}
	return errors.Join(joined...)
}

// ServerTLS serves the client port over TLS. Certificates are reread when
// their files change, without a restart.
type ServerTLS struct {
	// CertFile is the PEM certificate chain, leaf first. Empty, the
	// default: the client port speaks plain HTTP. Set with KeyFile.
	CertFile string `yaml:"cert_file"`
	// KeyFile is the PEM private key of CertFile's leaf.
	KeyFile string `yaml:"key_file"`
	// ClientCAFile is a PEM bundle of CAs; when set, clients must present
	// a certificate signed by one of them (mutual TLS). Empty, the
	// default: no client certificate is asked for. Needs CertFile.
	ClientCAFile string `yaml:"client_ca_file"`
}

// Enabled reports whether the client port serves TLS.
func (t ServerTLS) Enabled() bool { return t.CertFile != "" }

// UpstreamTLS configures TLS to engines whose URLs are https://.
type UpstreamTLS struct {
	// CAFile is a PEM bundle of the CAs engines' certificates must chain
	// to, reread when it changes. Empty, the default: the system's roots.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are the gateway's client certificate for
	// engines that ask for one (mutual TLS), reread when they change. Both
	// or neither; default none.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName is the name engines' certificates are checked against and
	// sent as SNI, instead of each URL's host. Empty, the default: the host.
	ServerName string `yaml:"server_name"`
}

// IsZero reports whether t sets nothing.
func (t UpstreamTLS) IsZero() bool { return t == UpstreamTLS{} }

// AdminExposed reports whether the admin port may be reached from beyond
// this machine without a key: admin_listen is not a loopback address
// (a host name other than localhost counts as beyond) and no
// auth.admin_keys_file is set. The gateway warns about it at start and
// --check notes it.
func (c *Config) AdminExposed() bool {
	if c.Auth.AdminKeysFile != "" {
		return false
	}
	host, _, err := net.SplitHostPort(c.Server.AdminListen)
	if err != nil {
		return true
	}
	if strings.EqualFold(strings.TrimSuffix(host, "."), "localhost") {
		return false
	}
	ip, err := netip.ParseAddr(host)
	return err != nil || !ip.IsLoopback()
}

// auth checks the auth section, the TLS sections and the models' limits.
func (v *validator) auth(c *Config) {
	a := &c.Auth
	v.period("auth.reload_interval", a.ReloadInterval)
	if a.AdminKeysFile != "" && a.AdminKeysFile == a.KeysFile {
		v.fail("auth.admin_keys_file", "must not be auth.keys_file: every client key would open the admin port")
	}
	for i := range c.Models {
		v.rateLimits(fmt.Sprintf("models[%d].limits", i), c.Models[i].Limits)
	}
	st := &c.Server.TLS
	v.pair("server.tls", st.CertFile, st.KeyFile)
	if st.ClientCAFile != "" && st.CertFile == "" {
		v.fail("server.tls.client_ca_file", "needs server.tls.cert_file: client certificates are asked for over TLS only")
	}
	ut := &c.Upstream.TLS
	v.pair("upstream.tls", ut.CertFile, ut.KeyFile)
	if ut.ServerName != "" && !isListenHost(ut.ServerName) {
		v.fail("upstream.tls.server_name", "must be a host name or an IP address")
	}
}

// UpstreamTLSUnused reports whether upstream.tls is set while no replica or
// DNS group is reached over https. It is a warning, not an error: replicas
// change live and upstream.tls only at a restart, so refusing it would keep
// a live change from moving the last engine off TLS.
func (c *Config) UpstreamTLSUnused() bool {
	return !c.Upstream.TLS.IsZero() && !anyHTTPS(c)
}

// pair checks that a certificate and its key are set together.
func (v *validator) pair(prefix, cert, key string) {
	switch {
	case cert != "" && key == "":
		v.fail(prefix+".key_file", "required with %s.cert_file", prefix)
	case cert == "" && key != "":
		v.fail(prefix+".cert_file", "required with %s.key_file", prefix)
	}
}

// anyHTTPS reports whether a replica or DNS group is reached over https.
func anyHTTPS(c *Config) bool {
	var urls []string
	for _, r := range c.Replicas {
		urls = append(urls, r.URL)
	}
	for _, g := range c.Discovery.DNS {
		urls = append(urls, g.URL)
	}
	for _, s := range urls {
		if u, err := url.Parse(s); err == nil && u.Scheme == "https" {
			return true
		}
	}
	return false
}

func (v *validator) rateLimits(prefix string, l Limits) {
	for _, f := range []struct {
		key string
		n   int64
	}{
		{"requests_per_minute", l.RequestsPerMinute},
		{"prompt_tokens_per_minute", l.PromptTokensPerMinute},
		{"output_tokens_per_minute", l.OutputTokensPerMinute},
	} {
		if f.n < 0 || f.n > MaxPerMinute {
			v.fail(prefix+"."+f.key, "must be between 0 (no limit) and %d", int64(MaxPerMinute))
		}
	}
}
