package compose

import (
	"bytes"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/gateway"
	"go.yaml.in/yaml/v3"
)

// composeFile is the part of the Compose file format the stack uses;
// any other key is an error (a misspelt key would be ignored by Docker).
type composeFile struct {
	Name       string             `yaml:"name"`
	Services   map[string]service `yaml:"services"`
	Extensions map[string]any     `yaml:",inline"` // x- blocks, merged into services
}

type service struct {
	Build *struct {
		Context    string            `yaml:"context"`
		Dockerfile string            `yaml:"dockerfile"`
		Args       map[string]string `yaml:"args"`
	} `yaml:"build"`
	Image       string            `yaml:"image"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Volumes     []string          `yaml:"volumes"`
	Ports       []string          `yaml:"ports"`
	DependsOn   []string          `yaml:"depends_on"`
	Restart     string            `yaml:"restart"`
}

// decodeStrict reads a YAML file into out, refusing keys out does not have.
func decodeStrict(t *testing.T, file string, out any) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(out); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

func loadCompose(t *testing.T) *composeFile {
	t.Helper()
	var c composeFile
	decodeStrict(t, "compose.yaml", &c)
	return &c
}

// The stack's services and the image its own ones run.
var (
	wantServices = []string{"gateway", "grafana", "jaeger", "prometheus", "sim-1", "sim-2", "sim-3"}
	sims         = []string{"sim-1", "sim-2", "sim-3"}
)

const ownImage = "inferrail:local"

// mount is the file or directory a service mounts at target, as a path
// relative to this directory; ok is false when nothing is mounted there.
func (s *service) mount(target string) (source string, ok bool) {
	for _, v := range s.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 && parts[1] == target {
			return parts[0], true
		}
	}
	return "", false
}

// flag is the value of a command-line flag given as "--name value" or
// "--name=value".
func (s *service) flag(name string) string {
	for i, a := range s.Command {
		if a == name && i+1 < len(s.Command) {
			return s.Command[i+1]
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

// listening is the container ports each service listens on, read from
// its command or config; the images of others listen on their defaults.
func listening(t *testing.T, c *composeFile) map[string][]string {
	t.Helper()
	gw := gatewayConfig(t, c)
	out := map[string][]string{
		"grafana": {"3000"},                  // GF_SERVER_HTTP_PORT is not set
		"jaeger":  {"16686", "4317", "4318"}, // UI, OTLP gRPC and HTTP
		"gateway": {port(t, gw.Server.Listen), port(t, gw.Server.AdminListen)},
	}
	pr := c.Services["prometheus"]
	out["prometheus"] = []string{port(t, pr.flag("--web.listen-address"))}
	for _, name := range sims {
		s := c.Services[name]
		if h := s.flag("--host"); h != "0.0.0.0" {
			t.Errorf("%s: --host %q; inside a container it must listen on 0.0.0.0 to be reached", name, h)
		}
		out[name] = []string{s.flag("--port")}
	}
	return out
}

func port(t *testing.T, hostport string) string {
	t.Helper()
	host, p, err := net.SplitHostPort(hostport)
	if err != nil || p == "" {
		t.Fatalf("%q: not host:port: %v", hostport, err)
	}
	if host != "" && host != "0.0.0.0" {
		t.Errorf("%q: inside a container a listener must take every address (0.0.0.0 or none)", hostport)
	}
	return p
}

// TestComposeServices: the stack's services are the ones the spec lists;
// every port is published on 127.0.0.1 only, once, to a port its service
// listens on; mounts are read-only and exist; the inferrail services run
// the image the Dockerfile builds, with binaries make build builds; other
// images are pinned.
func TestComposeServices(t *testing.T) {
	c := loadCompose(t)
	var names []string
	for n := range c.Services {
		names = append(names, n)
	}
	sort.Strings(names)
	if !slices.Equal(names, wantServices) {
		t.Fatalf("services %v, want %v", names, wantServices)
	}
	for k := range c.Extensions {
		if !strings.HasPrefix(k, "x-") {
			t.Errorf("top-level key %q is neither a Compose key the stack uses nor an x- extension", k)
		}
	}
	listens := listening(t, c)
	cmds := makeCMDS(t)
	hostPorts := map[string]string{}
	for _, name := range names {
		s := c.Services[name]
		for _, p := range s.Ports {
			parts := strings.Split(p, ":")
			if len(parts) != 3 || parts[0] != "127.0.0.1" {
				t.Errorf("%s: port %q; publish as 127.0.0.1:HOST:CONTAINER", name, p)
				continue
			}
			if other, ok := hostPorts[parts[1]]; ok {
				t.Errorf("%s and %s both publish host port %s", other, name, parts[1])
			}
			hostPorts[parts[1]] = name
			if !slices.Contains(listens[name], parts[2]) {
				t.Errorf("%s: publishes container port %s; it listens on %v", name, parts[2], listens[name])
			}
		}
		for _, v := range s.Volumes {
			parts := strings.Split(v, ":")
			if len(parts) != 3 || parts[2] != "ro" {
				t.Errorf("%s: volume %q; mount SOURCE:TARGET:ro", name, v)
				continue
			}
			if _, err := os.Stat(parts[0]); err != nil {
				t.Errorf("%s: volume %q: %v", name, v, err)
			}
		}
		for _, d := range s.DependsOn {
			if _, ok := c.Services[d]; !ok {
				t.Errorf("%s: depends on %q, which is no service", name, d)
			}
		}
		if s.Build == nil {
			if ref := s.Image[strings.LastIndex(s.Image, "/")+1:]; !strings.Contains(ref, ":") || strings.HasSuffix(ref, ":latest") {
				t.Errorf("%s: image %q is not pinned to a version", name, s.Image)
			}
			continue
		}
		if s.Build.Context != "../.." || s.Build.Dockerfile != "deploy/compose/Dockerfile" || s.Image != ownImage {
			t.Errorf("%s: build %+v, image %q; want the repository built by deploy/compose/Dockerfile as %s", name, *s.Build, s.Image, ownImage)
		}
		bin, ok := strings.CutPrefix(s.Command[0], "/usr/local/bin/")
		if !ok || !slices.Contains(cmds, bin) {
			t.Errorf("%s: runs %q, which is not one of make build's binaries %v in /usr/local/bin", name, s.Command[0], cmds)
		}
	}
	for _, want := range []string{"3000", "8080", "16686"} {
		if _, ok := hostPorts[want]; !ok {
			t.Errorf("nothing published on localhost:%s (Grafana 3000, gateway 8080, Jaeger 16686)", want)
		}
	}
}

// gatewayConfig is the config the gateway service runs, loaded as
// `inferrail-gateway --check` loads it.
func gatewayConfig(t *testing.T, c *composeFile) *config.Config {
	t.Helper()
	gw := c.Services["gateway"]
	src, ok := gw.mount(gw.flag("--config"))
	if !ok {
		t.Fatalf("the gateway's --config %q is not a file mounted into it", gw.flag("--config"))
	}
	cfg, err := config.Load(src)
	if err != nil {
		t.Fatalf("%s does not pass the gateway's validation: %v", src, err)
	}
	return cfg
}

// TestGatewayConfig: the gateway's config passes the gateway's own check
// with no tokenizer note, routes every simulator of the stack at the port
// it listens on, and runs least_request and prefix_hash in shadow.
func TestGatewayConfig(t *testing.T) {
	c := loadCompose(t)
	cfg := gatewayConfig(t, c)
	if notes := gateway.TokenizerProblems(cfg); len(notes) > 0 {
		t.Errorf("tokenizer notes: %v", notes)
	}
	listens := listening(t, c)
	var ids []string
	for _, r := range cfg.Replicas {
		u, err := url.Parse(r.URL)
		if err != nil {
			t.Fatal(err)
		}
		if u.Hostname() != r.ID || !slices.Contains(listens[r.ID], u.Port()) {
			t.Errorf("replica %s at %s: want the service of its name at the port it listens on (%v)", r.ID, r.URL, listens[r.ID])
		}
		ids = append(ids, r.ID)
	}
	if !slices.Equal(ids, sims) {
		t.Errorf("replicas %v, want the stack's simulators %v", ids, sims)
	}
	for _, m := range cfg.Models {
		if shadow := cfg.ModelShadow(m.Name); !slices.Equal(shadow, []string{"least_request", "prefix_hash"}) {
			t.Errorf("model %s: shadow %v, want least_request and prefix_hash", m.Name, shadow)
		}
	}
}

// prometheusConfig is the part of Prometheus's config format the stack
// uses.
type prometheusConfig struct {
	Global struct {
		ScrapeInterval     string `yaml:"scrape_interval"`
		EvaluationInterval string `yaml:"evaluation_interval"`
	} `yaml:"global"`
	ScrapeConfigs []struct {
		JobName       string `yaml:"job_name"`
		StaticConfigs []struct {
			Targets []string          `yaml:"targets"`
			Labels  map[string]string `yaml:"labels"`
		} `yaml:"static_configs"`
	} `yaml:"scrape_configs"`
}

// stackPrometheus is the config the prometheus service runs.
func stackPrometheus(t *testing.T, c *composeFile) (string, *prometheusConfig) {
	t.Helper()
	pr := c.Services["prometheus"]
	src, ok := pr.mount(pr.flag("--config.file"))
	if !ok {
		t.Fatalf("prometheus's --config.file %q is not a file mounted into it", pr.flag("--config.file"))
	}
	var pc prometheusConfig
	decodeStrict(t, src, &pc)
	return src, &pc
}

// TestPrometheusScrapesTheStack: Prometheus scrapes the gateway's metrics
// port and every simulator, each at a port its service listens on, and
// labels every engine with the gateway's name for it.
func TestPrometheusScrapesTheStack(t *testing.T) {
	c := loadCompose(t)
	_, pc := stackPrometheus(t, c)
	cfg := gatewayConfig(t, c)
	listens := listening(t, c)
	replicaAt := map[string]string{} // host:port → the gateway's replica id
	for _, r := range cfg.Replicas {
		replicaAt[strings.TrimPrefix(r.URL, "http://")] = r.ID
	}
	scraped := map[string]int{}
	for _, sc := range pc.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			for _, target := range st.Targets {
				host, p, err := net.SplitHostPort(target)
				if err != nil {
					t.Errorf("job %s: target %q: %v", sc.JobName, target, err)
					continue
				}
				if !slices.Contains(listens[host], p) {
					t.Errorf("job %s: target %s is no port service %q listens on (%v)", sc.JobName, target, host, listens[host])
				}
				scraped[host]++
				switch sc.JobName {
				case "gateway":
					if host != "gateway" || p != port(t, cfg.Server.AdminListen) {
						t.Errorf("job gateway: target %s, want the gateway's admin port %s", target, cfg.Server.AdminListen)
					}
				case "engines":
					if id := replicaAt[target]; id == "" || st.Labels["replica"] != id {
						t.Errorf("job engines: target %s labelled %v; want replica=%q, the gateway's name for it", target, st.Labels, id)
					}
				default:
					t.Errorf("job %s: the dashboard reads jobs gateway and engines only", sc.JobName)
				}
			}
		}
	}
	for _, name := range append([]string{"gateway"}, sims...) {
		if scraped[name] != 1 {
			t.Errorf("%s is scraped %d times, want once", name, scraped[name])
		}
	}
}

// grafanaDataSources is Grafana's data source provisioning file.
type grafanaDataSources struct {
	APIVersion  int `yaml:"apiVersion"`
	Datasources []struct {
		Name      string `yaml:"name"`
		UID       string `yaml:"uid"`
		Type      string `yaml:"type"`
		Access    string `yaml:"access"`
		URL       string `yaml:"url"`
		IsDefault bool   `yaml:"isDefault"`
		Editable  bool   `yaml:"editable"`
		JSONData  struct {
			TimeInterval string `yaml:"timeInterval"`
		} `yaml:"jsonData"`
	} `yaml:"datasources"`
}

// grafanaDashboards is Grafana's dashboard provisioning file.
type grafanaDashboards struct {
	APIVersion int `yaml:"apiVersion"`
	Providers  []struct {
		Name            string `yaml:"name"`
		Type            string `yaml:"type"`
		Folder          string `yaml:"folder"`
		DisableDeletion bool   `yaml:"disableDeletion"`
		AllowUIUpdates  bool   `yaml:"allowUiUpdates"`
		Options         struct {
			Path string `yaml:"path"`
		} `yaml:"options"`
	} `yaml:"providers"`
}

// TestGrafanaProvisioning: Grafana gets the stack's Prometheus as its
// default data source, told the scrape interval Prometheus uses, and the
// repository's dashboards directory, which holds the dashboard, as its
// home.
func TestGrafanaProvisioning(t *testing.T) {
	c := loadCompose(t)
	gr := c.Services["grafana"]
	src, ok := gr.mount("/etc/grafana/provisioning/datasources/inferrail.yaml")
	if !ok {
		t.Fatal("grafana: no data source provisioned")
	}
	var ds grafanaDataSources
	decodeStrict(t, src, &ds)
	_, pc := stackPrometheus(t, c)
	listens := listening(t, c)
	if len(ds.Datasources) != 1 {
		t.Fatalf("%d data sources, want the stack's Prometheus", len(ds.Datasources))
	}
	d := ds.Datasources[0]
	u, err := url.Parse(d.URL)
	if err != nil || d.Type != "prometheus" || !d.IsDefault || u.Hostname() != "prometheus" || !slices.Contains(listens["prometheus"], u.Port()) {
		t.Errorf("data source %+v: want the default, of type prometheus, at the prometheus service's port (%v)", d, err)
	}
	if d.JSONData.TimeInterval != pc.Global.ScrapeInterval {
		t.Errorf("data source timeInterval %q, Prometheus scrapes every %q: $__rate_interval would be sized wrong",
			d.JSONData.TimeInterval, pc.Global.ScrapeInterval)
	}

	src, ok = gr.mount("/etc/grafana/provisioning/dashboards/inferrail.yaml")
	if !ok {
		t.Fatal("grafana: no dashboards provisioned")
	}
	var dp grafanaDashboards
	decodeStrict(t, src, &dp)
	if len(dp.Providers) != 1 || dp.Providers[0].Type != "file" {
		t.Fatalf("dashboard providers %+v, want one of type file", dp.Providers)
	}
	dir, ok := gr.mount(dp.Providers[0].Options.Path)
	if !ok || filepath.Clean(dir) != filepath.Join("..", "..", "dashboards") {
		t.Errorf("the dashboards provider reads %s, which mounts %q; want the repository's dashboards", dp.Providers[0].Options.Path, dir)
	}
	if _, err := os.Stat(filepath.Join(dir, "inferrail.json")); err != nil {
		t.Error(err)
	}
	if home := gr.Environment["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]; home != path.Join(dp.Providers[0].Options.Path, "inferrail.json") {
		t.Errorf("home dashboard %q, want the provisioned inferrail.json", home)
	}
}

// makeCMDS is the Makefile's list of the binaries make build builds.
func makeCMDS(t *testing.T) []string {
	t.Helper()
	v := makeVar(t, "CMDS", ":=")
	return strings.Fields(v)
}

// makeVar is the value of a Makefile variable assigned with op.
func makeVar(t *testing.T, name, op string) string {
	t.Helper()
	data, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimPrefix(line, "export ")
		if k, v, ok := strings.Cut(line, op); ok && strings.TrimSpace(k) == name {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("the Makefile sets no %s", name)
	return ""
}

// makeLine is the first Makefile line that starts with prefix, once
// indentation is trimmed.
func makeLine(t *testing.T, prefix string) string {
	t.Helper()
	data, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if line = strings.TrimSpace(line); strings.HasPrefix(line, prefix) {
			return line
		}
	}
	t.Fatalf("the Makefile has no line starting %q", prefix)
	return ""
}

// dockerInstruction is one instruction of a Dockerfile, continuation
// lines joined.
type dockerInstruction struct {
	op   string
	args []string
}

func readDockerfile(t *testing.T) []dockerInstruction {
	t.Helper()
	data, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var out []dockerInstruction
	var cur strings.Builder
	for _, line := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if more, ok := strings.CutSuffix(trimmed, "\\"); ok {
			cur.WriteString(more + " ")
			continue
		}
		cur.WriteString(trimmed)
		f := strings.Fields(cur.String())
		out = append(out, dockerInstruction{strings.ToUpper(f[0]), f[1:]})
		cur.Reset()
	}
	return out
}

// TestDockerfileBuildsWhatMakeBuilds: the image's build stage uses the
// toolchain the Makefile pins, with cgo off, and builds exactly the
// Makefile's CMDS with -trimpath, as make build does; the image they land
// in starts from nothing.
func TestDockerfileBuildsWhatMakeBuilds(t *testing.T) {
	cmds := makeCMDS(t)
	toolchain := makeVar(t, "GOTOOLCHAIN", ":=")
	if cgo := makeVar(t, "CGO_ENABLED", ":="); cgo != "0" {
		t.Fatalf("the Makefile builds with CGO_ENABLED=%s; this test expects static binaries", cgo)
	}
	if build := makeLine(t, "$(GO) build "); !strings.Contains(build, " -trimpath ") {
		t.Fatalf("make build's line %q has no -trimpath; keep the Dockerfile's in step", build)
	}
	var froms []string
	env := map[string]string{}
	var built []string
	var buildArgs []string
	copied := false
	for _, in := range readDockerfile(t) {
		switch in.op {
		case "FROM":
			froms = append(froms, strings.Join(in.args, " "))
		case "ENV":
			for _, a := range in.args {
				if k, v, ok := strings.Cut(a, "="); ok && len(froms) == 1 {
					env[k] = v
				}
			}
		case "RUN":
			_, rest, ok := strings.Cut(strings.Join(in.args, " "), "go build ")
			if !ok {
				continue
			}
			buildArgs = strings.Fields(rest)
			for _, a := range buildArgs {
				if c, ok := strings.CutPrefix(a, "./cmd/"); ok {
					built = append(built, c)
				}
			}
		case "COPY":
			if strings.Join(in.args, " ") == "--from=build /out/ /usr/local/bin/" {
				copied = true
			}
		}
	}
	if len(froms) != 2 || froms[0] != "golang:"+strings.TrimPrefix(toolchain, "go")+" AS build" || froms[1] != "scratch" {
		t.Errorf("stages %q; want golang:%s AS build, then scratch", froms, strings.TrimPrefix(toolchain, "go"))
	}
	if env["GOTOOLCHAIN"] != toolchain || env["CGO_ENABLED"] != "0" {
		t.Errorf("build stage ENV %v; want GOTOOLCHAIN=%s and CGO_ENABLED=0 as the Makefile exports", env, toolchain)
	}
	sort.Strings(built)
	want := slices.Sorted(slices.Values(cmds))
	if !slices.Equal(built, want) {
		t.Errorf("the Dockerfile builds %v; make build builds %v", built, want)
	}
	if !slices.Contains(buildArgs, "-trimpath") || !slices.Contains(buildArgs, "/out/") {
		t.Errorf("go build %v; want -trimpath -o /out/ as make build", buildArgs)
	}
	if !copied {
		t.Error("the final stage does not copy /out/ to /usr/local/bin/")
	}
	// Stamped as make build stamps, from the build args compose.yaml
	// passes (found by a review: the stack's binaries said "unknown").
	ldflags := strings.Join(buildArgs, " ")
	makefile, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	for _, stamp := range []string{"cli.stampedRevision=${REVISION}", "cli.stampedModified=${MODIFIED}"} {
		if !strings.Contains(ldflags, stamp) || !strings.Contains(string(makefile), strings.SplitN(stamp, "$", 2)[0]) {
			t.Errorf("go build %v does not set %s as make build's STAMP does", buildArgs, stamp)
		}
	}
	args := loadCompose(t).Services["gateway"].Build.Args
	if args["REVISION"] != "${INFERRAIL_REVISION:-}" || args["MODIFIED"] != "${INFERRAIL_MODIFIED:-}" {
		t.Errorf("compose build args %v; want REVISION and MODIFIED from INFERRAIL_REVISION and INFERRAIL_MODIFIED", args)
	}
}

// TestMakeStack: make stack and stack-down drive this compose file, whose
// Prometheus is the release make dashboard-check proves the dashboard on.
func TestMakeStack(t *testing.T) {
	release := makeVar(t, "PROMETHEUS_RELEASE", ":=")
	if img := loadCompose(t).Services["prometheus"].Image; img != "prom/prometheus:v"+release {
		t.Errorf("the stack runs %s; make dashboard-check proves the dashboard on Prometheus %s", img, release)
	}
	if got := makeVar(t, "COMPOSE", ":="); got != "docker compose -f deploy/compose/compose.yaml" {
		t.Errorf("COMPOSE := %q; want docker compose on deploy/compose/compose.yaml", got)
	}
	data, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	// make stack passes the commit to the image's build, as make build
	// stamps it, through compose.yaml's build args.
	for _, target := range []string{"stack:\n\tINFERRAIL_REVISION=$(shell git rev-parse HEAD", "\t$(COMPOSE) up --build", "stack-down:\n\t$(COMPOSE) down"} {
		if !bytes.Contains(data, []byte(target)) {
			t.Errorf("the Makefile has no %q", target)
		}
	}
}
