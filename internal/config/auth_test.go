package config

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

func TestAdminExposed(t *testing.T) {
	tests := []struct {
		listen, adminKeys string
		want              bool
	}{
		{"127.0.0.1:9090", "", false},
		{"[::1]:9090", "", false},
		{"localhost:9090", "", false},
		{"127.0.0.2:9090", "", false},
		{"0.0.0.0:9090", "", true},
		{":9090", "", true},
		{"[::]:9090", "", true},
		{"10.0.0.5:9090", "", true},
		{"admin.internal:9090", "", true},
		{"0.0.0.0:9090", "admin-keys.yaml", false},
	}
	for _, tc := range tests {
		c := Default()
		c.Server.AdminListen, c.Auth.AdminKeysFile = tc.listen, tc.adminKeys
		if got := c.AdminExposed(); got != tc.want {
			t.Errorf("AdminExposed() with admin_listen %q, admin_keys_file %q = %v, want %v", tc.listen, tc.adminKeys, got, tc.want)
		}
	}
}

func TestLimitsValidate(t *testing.T) {
	tests := []struct {
		l    Limits
		want []string
	}{
		{Limits{}, nil},
		{Limits{RequestsPerMinute: 1, PromptTokensPerMinute: MaxPerMinute, OutputTokensPerMinute: 5}, nil},
		{Limits{RequestsPerMinute: -1, OutputTokensPerMinute: MaxPerMinute + 1}, []string{
			"keys[3].limits.requests_per_minute: must be between 0 (no limit) and 10000000000",
			"keys[3].limits.output_tokens_per_minute: must be between 0 (no limit) and 10000000000",
		}},
	}
	for _, tc := range tests {
		got := messages(tc.l.Validate("keys[3].limits"))
		if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
			t.Errorf("%+v.Validate() = %q, want %q", tc.l, got, tc.want)
		}
	}
}

// drawAuth fills the auth and TLS sections and the models' limits of a
// generated config, for the round trip.
func drawAuth(t *rapid.T, c *Config) {
	path := rapid.StringMatching(`(/[a-z0-9._-]{1,12}){1,3}`)
	optPath := func(label string) string {
		if rapid.Bool().Draw(t, label+"_set") {
			return path.Draw(t, label)
		}
		return ""
	}
	c.Auth.KeysFile = optPath("keys_file")
	if c.Auth.AdminKeysFile = optPath("admin_keys_file"); c.Auth.AdminKeysFile == c.Auth.KeysFile {
		c.Auth.AdminKeysFile = ""
	}
	c.Auth.ReloadInterval = drawDuration(t, "reload_interval", MinPeriod, Duration(time.Hour))
	if rapid.Bool().Draw(t, "server_tls") {
		c.Server.TLS = ServerTLS{CertFile: path.Draw(t, "cert_file"), KeyFile: path.Draw(t, "key_file"), ClientCAFile: optPath("client_ca_file")}
	}
	limit := rapid.OneOf(rapid.Just(int64(0)), rapid.Int64Range(1, MaxPerMinute))
	for i := range c.Models {
		c.Models[i].Limits = Limits{RequestsPerMinute: limit.Draw(t, "rpm"), PromptTokensPerMinute: limit.Draw(t, "ptpm"), OutputTokensPerMinute: limit.Draw(t, "otpm")}
	}
	https := false
	for _, r := range c.Replicas {
		u, _ := url.Parse(r.URL)
		https = https || u.Scheme == "https"
	}
	for _, g := range c.Discovery.DNS {
		u, _ := url.Parse(g.URL)
		https = https || u.Scheme == "https"
	}
	if https && rapid.Bool().Draw(t, "upstream_tls") {
		c.Upstream.TLS = UpstreamTLS{CAFile: optPath("ca_file"), ServerName: rapid.SampledFrom([]string{"", "vllm.internal", "10.0.0.1"}).Draw(t, "server_name")}
		if rapid.Bool().Draw(t, "client_cert") {
			c.Upstream.TLS.CertFile, c.Upstream.TLS.KeyFile = path.Draw(t, "client_cert_file"), path.Draw(t, "client_key_file")
		}
	}
}
