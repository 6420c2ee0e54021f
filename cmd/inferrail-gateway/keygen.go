package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/inferrail/inferrail/internal/auth"
)

// runKeygen is `inferrail-gateway keygen`: it makes a new API key and
// prints it once, with the entry that lets it in (its name and hash) to
// paste into auth.keys_file. The key itself is stored nowhere.
func runKeygen(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("inferrail-gateway keygen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: inferrail-gateway keygen --name NAME [--models a,b] [--priority critical|standard|sheddable]")
		fmt.Fprintln(stderr, "Prints a new API key once, and the entry for auth.keys_file that holds only its hash.")
		fs.PrintDefaults()
	}
	name := fs.String("name", "", "the key's name in metrics and logs (required): 1 to 63 of A-Z a-z 0-9 . _ -")
	models := fs.String("models", "", "comma-separated models the key may use (spaces around a name are dropped); empty: every model")
	priority := fs.String("priority", "", "priority class: critical, standard (the default) or sheddable")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("keygen takes no arguments, got %q", fs.Args())
	}
	if *name == "" {
		return errors.New("keygen: --name is required")
	}
	secret, h := auth.NewSecret()
	k := &auth.Key{Name: *name, Hash: h}
	if *models != "" {
		for m := range strings.SplitSeq(*models, ",") {
			k.Models = append(k.Models, strings.TrimSpace(m))
		}
	}
	var ok bool
	if k.Priority, ok = auth.ParsePriority(*priority); !ok {
		return fmt.Errorf("keygen: --priority must be critical, standard or sheddable, not %q", *priority)
	}
	entry := auth.FormatEntry(k)
	// The entry must read back as written: a bad name or model list is
	// refused here rather than when the gateway reads the file.
	if _, err := auth.Parse([]byte("keys:\n"+entry), auth.Options{}); err != nil {
		return fmt.Errorf("keygen: %w", err)
	}
	fmt.Fprintf(stdout, "# API key %q, shown this once and stored nowhere: give it to its client.\n%s\n", *name, secret)
	fmt.Fprintf(stdout, "# Its entry, for the keys list of auth.keys_file:\n%s", entry)
	return nil
}
