package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/inferrail/inferrail/internal/enginehash"
	"github.com/inferrail/inferrail/internal/events"
)

// KVEventsConfig is vLLM's --kv-events-config: whether and where the engine
// publishes its KV cache events. JSON keys and defaults are vLLM's
// (KVEventsConfig); the zero value publishes nothing.
type KVEventsConfig struct {
	Enable bool `json:"enable_kv_cache_events"`
	// Publisher is "zmq" or "null"; empty means "zmq" when Enable is set,
	// "null" otherwise, as vLLM decides it.
	Publisher string `json:"publisher"`
	// Endpoint is the PUB socket, default tcp://*:5557. As in vLLM, an
	// endpoint with "*" or "::" in it is bound; any other is connected to,
	// which the simulator does not support.
	Endpoint string `json:"endpoint"`
	// ReplayEndpoint is the ROUTER socket answering replay requests, always
	// bound; empty means no replay.
	ReplayEndpoint string `json:"replay_endpoint"`
	// BufferSteps is how many past batches replay can send (default 10000).
	BufferSteps int `json:"buffer_steps"`
	// HWM is how many messages the PUB socket queues per subscriber before
	// it drops (default 100000).
	HWM int `json:"hwm"`
	// MaxQueueSize is how many batches wait for the publisher before the
	// engine drops new ones (default 100000).
	MaxQueueSize int `json:"max_queue_size"`
	// Topic is the first frame of every message (default empty).
	Topic string `json:"topic"`
}

// kvEventsKeys are KVEventsConfig's JSON names, as vLLM spells them.
var kvEventsKeys = func() []string {
	var keys []string
	t := reflect.TypeFor[KVEventsConfig]()
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
			keys = append(keys, name)
		}
	}
	return keys
}()

// DefaultKVEventsConfig is vLLM's defaults, which the JSON overrides;
// events stay off until Enable is set.
func DefaultKVEventsConfig() KVEventsConfig {
	return KVEventsConfig{
		Endpoint:     "tcp://*:5557",
		BufferSteps:  10000,
		HWM:          100000,
		MaxQueueSize: 100000,
	}
}

// ParseKVEventsConfig reads --kv-events-config's JSON. Unknown keys are
// refused, as vLLM's config class refuses them, and so are known ones
// spelled in another case (encoding/json would match them).
func ParseKVEventsConfig(s string) (KVEventsConfig, error) {
	c := DefaultKVEventsConfig()
	var members map[string]json.RawMessage
	if json.Unmarshal([]byte(s), &members) == nil {
		for _, k := range slices.Sorted(maps.Keys(members)) {
			if !slices.Contains(kvEventsKeys, k) {
				return KVEventsConfig{}, fmt.Errorf("--kv-events-config: json: unknown field %q", k)
			}
		}
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(s)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return KVEventsConfig{}, fmt.Errorf("--kv-events-config: %w", err)
	}
	if dec.More() {
		return KVEventsConfig{}, errors.New("--kv-events-config: more than one JSON value")
	}
	if c.Publisher == "" {
		c.Publisher = "null"
		if c.Enable {
			c.Publisher = "zmq"
		}
	}
	return c, c.validate()
}

// Publishing reports whether events go anywhere.
func (c *KVEventsConfig) Publishing() bool { return c.Enable && c.Publisher == "zmq" }

func (c *KVEventsConfig) validate() error {
	var errs []error
	if c.Publisher != "zmq" && c.Publisher != "null" {
		errs = append(errs, fmt.Errorf("--kv-events-config: publisher must be \"zmq\" or \"null\", got %q", c.Publisher))
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"buffer_steps", c.BufferSteps}, {"hwm", c.HWM}, {"max_queue_size", c.MaxQueueSize}} {
		if f.v <= 0 {
			errs = append(errs, fmt.Errorf("--kv-events-config: %s must be positive, got %d", f.name, f.v))
		}
	}
	if c.Publishing() {
		if _, err := bindAddr(c.Endpoint, "endpoint", 0); err != nil {
			errs = append(errs, err)
		}
		if c.ReplayEndpoint != "" {
			if _, err := bindAddr(c.ReplayEndpoint, "replay_endpoint", 0); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// bindAddr turns a ZeroMQ tcp endpoint the engine binds into a listen
// address, its port offset by the data-parallel rank as vLLM offsets it (so
// rank 1 of tcp://*:5557 binds 5558; port 0 stays 0, any free port).
func bindAddr(endpoint, key string, rank int) (string, error) {
	rest, ok := strings.CutPrefix(endpoint, "tcp://")
	if !ok {
		return "", fmt.Errorf("--kv-events-config: %s %q: the simulator publishes only on tcp:// endpoints", key, endpoint)
	}
	if key == "endpoint" && !strings.Contains(rest, "*") && !strings.Contains(rest, "::") {
		return "", fmt.Errorf("--kv-events-config: endpoint %q would be connected to, as vLLM connects a PUB endpoint without * or ::; the simulator only binds (use tcp://*:PORT)", endpoint)
	}
	host, portText, err := net.SplitHostPort(rest)
	if err != nil {
		return "", fmt.Errorf("--kv-events-config: %s %q: %v", key, endpoint, err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port < 0 || port > 65535 {
		return "", fmt.Errorf("--kv-events-config: %s %q: port must be within 0-65535", key, endpoint)
	}
	if port != 0 {
		port += rank
		if port > 65535 {
			return "", fmt.Errorf("--kv-events-config: %s %q: port %d past 65535 for data-parallel rank %d", key, endpoint, port, rank)
		}
	}
	if host == "*" {
		host = ""
	}
	return net.JoinHostPort(host, strconv.Itoa(port)), nil
}

func (c *Config) validateKVEvents() []error {
	var errs []error
	if err := c.KVEvents.validate(); c.KVEvents != (KVEventsConfig{}) && err != nil {
		errs = append(errs, err)
	}
	if enc, err := events.ParseEncoding(c.KVEventsEncoding); err != nil {
		errs = append(errs, fmt.Errorf("--kv-events-encoding: %w", err))
	} else if enc == events.EncodingSGLang && c.SlidingWindow > 0 {
		errs = append(errs, errors.New("--sliding-window: SGLang's KV events name no KV-cache group; use --kv-events-encoding map or array"))
	}
	if c.PrefixCachingHashAlgo != "" {
		if _, err := enginehash.ParseAlgo(c.PrefixCachingHashAlgo); err != nil {
			errs = append(errs, fmt.Errorf("--prefix-caching-hash-algo: %w", err))
		}
	}
	if c.DataParallelRank < 0 {
		errs = append(errs, fmt.Errorf("--data-parallel-rank: must not be negative, got %d", c.DataParallelRank))
	}
	return errs
}

// hashAlgoName is the --prefix-caching-hash-algo in effect.
func hashAlgoName(c *Config) string {
	if c.PrefixCachingHashAlgo == "" {
		return "sha256"
	}
	return c.PrefixCachingHashAlgo
}
