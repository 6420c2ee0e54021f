package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/inferrail/inferrail/internal/auth"
)

func TestKeygen(t *testing.T) {
	// A space after a comma is not part of a name (a review's finding: " n"
	// was written out, a model no config has).
	secret, entry := keygen(t, "--name", "team-a", "--models", "m, n", "--priority", "critical")
	set, err := auth.Parse([]byte("keys:\n"+entry), auth.Options{})
	if err != nil {
		t.Fatalf("the printed entry does not parse: %v\n%s", err, entry)
	}
	k := set.Lookup(secret)
	if k == nil || k.Name != "team-a" || strings.Join(k.Models, ",") != "m,n" || k.Priority != auth.Critical {
		t.Fatalf("the printed secret finds %+v in its entry:\n%s", k, entry)
	}
	if strings.Contains(entry, secret) {
		t.Error("the entry holds the secret")
	}
	other, _ := keygen(t, "--name", "team-a")
	if other == secret {
		t.Error("two runs printed the same key")
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "--name is required"},
		{[]string{"--name", "a b"}, "keys[0].name: must be 1 to 63"},
		{[]string{"--name", "a", "--priority", "urgent"}, "--priority must be critical, standard or sheddable"},
		{[]string{"--name", "a", "--models", "m,,n"}, "keys[0].models[1]: must not be empty"},
		{[]string{"--name", "a", "extra"}, "takes no arguments"},
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), append([]string{"keygen"}, tc.args...), &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("keygen %v: %v, want %q", tc.args, err, tc.want)
		}
		if out.Len() > 0 {
			t.Errorf("keygen %v failed but printed %q", tc.args, out.String())
		}
	}
}

// TestCheckReadsKeysAndCertificates: --check reads the key files and TLS
// files a config names, and notes an admin port open beyond loopback.
func TestCheckReadsKeysAndCertificates(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys.yaml")
	_, entry := keygen(t, "--name", "a", "--models", "m")
	if err := os.WriteFile(keys, []byte("keys:\n"+entry), 0o600); err != nil {
		t.Fatal(err)
	}
	strangers := filepath.Join(dir, "strangers.yaml")
	_, entry = keygen(t, "--name", "b", "--models", "x")
	if err := os.WriteFile(strangers, []byte("keys:\n"+entry), 0o600); err != nil {
		t.Fatal(err)
	}
	base := "models: [{name: m}]\nreplicas: [{id: r, url: 'http://127.0.0.1:1', models: [m]}]\n"
	for _, tc := range []struct {
		name, extra string
		err, note   string
	}{
		{"keys", "auth: {keys_file: " + keys + "}\n", "", ""},
		{"missing_keys", "auth: {keys_file: " + filepath.Join(dir, "none.yaml") + "}\n", "auth.keys_file", ""},
		{"unknown_model_in_keys", "auth: {keys_file: " + strangers + "}\n", `keys[0].models[0]: "x" is not a configured model or alias`, ""},
		{"missing_certificate", "server: {tls: {cert_file: /no/such.crt, key_file: /no/such.key}}\n", "server_cert", ""},
		{"exposed_admin", "server: {admin_listen: '0.0.0.0:9191'}\n", "", "note: server.admin_listen 0.0.0.0:9191 is beyond loopback"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, "config-"+tc.name+".yaml")
			if err := os.WriteFile(path, []byte(base+tc.extra), 0o600); err != nil {
				t.Fatal(err)
			}
			var out, errOut bytes.Buffer
			err := run(context.Background(), []string{"--check", "--config", path}, &out, &errOut)
			switch {
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("--check: %v, want an error naming %s", err, tc.err)
			case tc.err == "" && err != nil:
				t.Errorf("--check: %v", err)
			case tc.note != "" && !strings.Contains(out.String(), tc.note):
				t.Errorf("--check printed %q, want %q", out.String(), tc.note)
			}
		})
	}
}
