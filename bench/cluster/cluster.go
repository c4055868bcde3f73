// Package cluster starts and supervises a local relevance cluster: N scorer nodes (real model or
// emulated from a cost profile) and a proxy in front of them, as child processes of one
// supervisor. It is what `make run` (bench cluster) and `bench compare` use.
//
// The nodes can instead be fakes of another rerank server (nodes.kind: vllm, sglang, llamacpp,
// tei or infinity): N `bench fakerank` children, each speaking that server's HTTP API with the
// latency the cost profile predicts, behind a queue of nodes.concurrency slots. The proxy then
// gets a generated config (the proxy config file with proxy.nodes.backends listing the fakes,
// written to the log dir) instead of --nodes. Such a cluster is emulated.
//
// Children run in their own process groups and die with the supervisor (Pdeathsig on Linux). A
// child that exits during start-up is reported with its last log lines and the start fails. Once
// running, Supervise keeps the cluster up: a scorer node that dies is reported and restarted with
// the same arguments while the others keep serving (so failover can be watched on the default
// cluster); the proxy dying ends it. A Cluster's methods are safe for concurrent use; Stop is
// idempotent.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/relevance-scoring/relevance/internal/fakerank"
	"github.com/relevance-scoring/relevance/internal/yamlconf"
	"github.com/relevance-scoring/relevance/proxy"
	"github.com/relevance-scoring/relevance/proxy/backend"
)

// Config is a local cluster (configs/local.yaml).
type Config struct {
	// BinDir holds scorer and proxy (and bench, for fake nodes); "" means bin.
	BinDir string `yaml:"bin_dir"`
	// LogDir receives one log file per child; "" means .cache/cluster.
	LogDir string `yaml:"log_dir"`
	// ReadyTimeout bounds the wait for every /readyz (model loading included); 0 means 5m.
	ReadyTimeout time.Duration `yaml:"ready_timeout"`
	Model        Model         `yaml:"model"`
	Nodes        Nodes         `yaml:"nodes"`
	Proxy        Proxy         `yaml:"proxy"`
}

// Model is the checkpoint the real nodes load; generated once with `scorer gen-model`.
type Model struct {
	// Dir is the cached checkpoint folder; "" means models/<preset>-<arch>-seed<seed>.
	Dir string `yaml:"dir"`
	// Arch is qwen3, qwen3_moe or qwen2_moe; "" means qwen3_moe.
	Arch string `yaml:"arch"`
	// Preset is tiny or small; "" means small.
	Preset string `yaml:"preset"`
	// Seed of the generated weights; 0 means 1.
	Seed int `yaml:"seed"`
}

// generatedName is the folder name gen-model's checkpoint of this preset, arch and seed is
// cached under.
func (m Model) generatedName() string {
	return fmt.Sprintf("%s-%s-seed%d", m.Preset, m.Arch, m.Seed)
}

// randomNote is what the log says after a generated checkpoint's name: its rankings are noise,
// which a new user's first copy-paste would otherwise take for a broken system.
const randomNote = "random weights: the scores show the system at work, not relevance; README \"Serving a real reranker\" says how to load one"

// Nodes are the scorer nodes.
type Nodes struct {
	// Kind is scorer (our scorer node, default) or a rerank server that `bench fakerank` fakes:
	// vllm, sglang, llamacpp, tei or infinity (its HTTP API, our engine's speed from CostProfile,
	// which is then required). Engine, Threads, MaxTokens, MoEPolicy, GRPCBasePort and Args are
	// the scorer's and do not apply to fakes; a fake listens on HTTPBasePort+i (0: a free port).
	Kind string `yaml:"kind"`
	// Concurrency is how many calls a fake node processes at a time (the rest queue); 0 means
	// 1, as our emulated node runs one pass at a time. Fakes only.
	Concurrency int `yaml:"concurrency"`
	// Count of nodes; 0 means 2.
	Count int `yaml:"count"`
	// Threads per node (compute threads); 0 leaves the scorer's default.
	Threads int `yaml:"threads"`
	// Host to bind; "" means 127.0.0.1.
	Host string `yaml:"host"`
	// GRPCBasePort and HTTPBasePort: node i listens on base+i; 0 picks free ports.
	GRPCBasePort int `yaml:"grpc_base_port"`
	HTTPBasePort int `yaml:"http_base_port"`
	// Engine is real or emulated; "" means real.
	Engine string `yaml:"engine"`
	// CostProfile is the emulated engine's profile (required when Engine is emulated).
	CostProfile string `yaml:"cost_profile"`
	// MaxTokens caps a prompt's tokens; 0 leaves the scorer's default.
	MaxTokens int `yaml:"max_tokens"`
	// MoEPolicy is threshold, auto or fixed:<blockM>; "" leaves the scorer's default.
	MoEPolicy string `yaml:"moe_policy"`
	// CalibrationCache is the nodes' calibration_cache folder (a real node restarted with the
	// same model and settings reuses its start-up calibration; an emulated node never calibrates);
	// "" leaves the scorer's default (none).
	CalibrationCache string `yaml:"calibration_cache"`
	// Args are extra flags for every node.
	Args []string `yaml:"args"`
}

// Proxy is the front.
type Proxy struct {
	// HTTPAddr and GRPCAddr; "" means 127.0.0.1:8080 and 127.0.0.1:9090 (the contract).
	HTTPAddr string `yaml:"http_addr"`
	GRPCAddr string `yaml:"grpc_addr"`
	// Split is fixed or cost; Route is random, round_robin, least_loaded or prefix_affinity; "" leaves the
	// proxy's defaults.
	Split string `yaml:"split"`
	Route string `yaml:"route"`
	Hedge bool   `yaml:"hedge"`
	// SLO is the default request budget; 0 leaves the proxy's default.
	SLO time.Duration `yaml:"slo"`
	// TokenCounter is exact or estimate; "" leaves the proxy's default.
	TokenCounter string `yaml:"token_counter"`
	// Config is a proxy YAML passed as --config; "" passes none.
	Config string `yaml:"config"`
	// Args are extra flags.
	Args []string `yaml:"args"`
}

// LoadConfig reads a YAML cluster config: defaults, file, validation.
func LoadConfig(path string) (Config, error) {
	var c Config
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return c, fmt.Errorf("load cluster config: %w", err)
		}
		if err := yamlconf.Decode(b, &c); err != nil {
			return c, fmt.Errorf("load cluster config %s: %w", path, err)
		}
	}
	c.Defaults()
	return c, c.Validate()
}

// Defaults fills unset fields.
func (c *Config) Defaults() {
	if c.BinDir == "" {
		c.BinDir = "bin"
	}
	if c.LogDir == "" {
		c.LogDir = ".cache/cluster"
	}
	if c.ReadyTimeout == 0 {
		c.ReadyTimeout = 5 * time.Minute
	}
	if c.Model.Arch == "" {
		c.Model.Arch = "qwen3_moe"
	}
	if c.Model.Preset == "" {
		c.Model.Preset = "small"
	}
	if c.Model.Seed == 0 {
		c.Model.Seed = 1
	}
	if c.Model.Dir == "" {
		c.Model.Dir = filepath.Join("models", c.Model.generatedName())
	}
	if c.Nodes.Count == 0 {
		c.Nodes.Count = 2
	}
	if c.Nodes.Host == "" {
		c.Nodes.Host = "127.0.0.1"
	}
	if c.Nodes.Engine == "" {
		c.Nodes.Engine = "real"
	}
	if c.Nodes.Kind == "" {
		c.Nodes.Kind = KindScorer
	}
	if c.Proxy.HTTPAddr == "" {
		c.Proxy.HTTPAddr = "127.0.0.1:8080"
	}
	if c.Proxy.GRPCAddr == "" {
		c.Proxy.GRPCAddr = "127.0.0.1:9090"
	}
}

// Validate names the first bad field.
func (c *Config) Validate() error {
	switch {
	case c.Nodes.Count < 1 || c.Nodes.Count > 256:
		return fmt.Errorf("nodes.count: must be in [1, 256], got %d", c.Nodes.Count)
	case c.Nodes.Threads < 0:
		return fmt.Errorf("nodes.threads: must be ≥ 0, got %d", c.Nodes.Threads)
	case c.Nodes.GRPCBasePort < 0 || c.Nodes.GRPCBasePort+c.Nodes.Count > 65535:
		return fmt.Errorf("nodes.grpc_base_port: out of range, got %d", c.Nodes.GRPCBasePort)
	case c.Nodes.HTTPBasePort < 0 || c.Nodes.HTTPBasePort+c.Nodes.Count > 65535:
		return fmt.Errorf("nodes.http_base_port: out of range, got %d", c.Nodes.HTTPBasePort)
	case c.Nodes.Engine != "real" && c.Nodes.Engine != "emulated":
		return fmt.Errorf("nodes.engine: must be real or emulated, got %q", c.Nodes.Engine)
	case c.Nodes.Engine == "emulated" && c.Nodes.CostProfile == "":
		return errors.New("nodes.cost_profile: required when nodes.engine is emulated")
	case c.Nodes.Kind != KindScorer && fakerank.HealthPath(c.Nodes.Kind) == "":
		return fmt.Errorf("nodes.kind: must be %s or one of %s, got %q", KindScorer, strings.Join(fakerank.Kinds(), ", "), c.Nodes.Kind)
	case c.Nodes.Fake() && c.Nodes.CostProfile == "":
		return fmt.Errorf("nodes.cost_profile: required when nodes.kind is %s (the fakes' latency)", c.Nodes.Kind)
	case c.Nodes.Concurrency < 0:
		return fmt.Errorf("nodes.concurrency: must be ≥ 0, got %d", c.Nodes.Concurrency)
	case c.Proxy.Split != "" && !slices.Contains(proxy.SplitStrategies(), c.Proxy.Split):
		return fmt.Errorf("proxy.split: must be one of %s, got %q", strings.Join(proxy.SplitStrategies(), ", "), c.Proxy.Split)
	case c.Proxy.Route != "" && !slices.Contains(proxy.RouteStrategies(), c.Proxy.Route):
		return fmt.Errorf("proxy.route: must be one of %s, got %q", strings.Join(proxy.RouteStrategies(), ", "), c.Proxy.Route)
	case c.Proxy.SLO < 0:
		return fmt.Errorf("proxy.slo: must be ≥ 0, got %v", c.Proxy.SLO)
	case c.ReadyTimeout < 0:
		return fmt.Errorf("ready_timeout: must be ≥ 0, got %v", c.ReadyTimeout)
	}
	switch c.Model.Arch {
	case "qwen3", "qwen3_moe", "qwen2_moe":
	default:
		return fmt.Errorf("model.arch: must be qwen3, qwen3_moe or qwen2_moe, got %q", c.Model.Arch)
	}
	if c.Model.Preset != "tiny" && c.Model.Preset != "small" {
		return fmt.Errorf("model.preset: must be tiny or small, got %q", c.Model.Preset)
	}
	for _, a := range []struct{ field, addr string }{{"proxy.http_addr", c.Proxy.HTTPAddr}, {"proxy.grpc_addr", c.Proxy.GRPCAddr}} {
		_, port, err := net.SplitHostPort(a.addr)
		if err != nil {
			return fmt.Errorf("%s: want host:port, got %q", a.field, a.addr)
		}
		if port == "0" {
			// Readiness is polled and the examples are printed at this address.
			return fmt.Errorf("%s: needs a fixed port (0 is not resolved), got %q", a.field, a.addr)
		}
	}
	return c.checkPortRanges()
}

// checkPortRanges refuses fixed node port ranges (base+i for node i) that share a port with each
// other or with the proxy: the start would otherwise fail on a port "taken" by its own cluster.
func (c *Config) checkPortRanges() error {
	type span struct {
		field string
		lo    int
	}
	var spans []span
	if c.Nodes.GRPCBasePort > 0 && !c.Nodes.Fake() { // fakes listen on HTTP only
		spans = append(spans, span{"nodes.grpc_base_port", c.Nodes.GRPCBasePort})
	}
	if c.Nodes.HTTPBasePort > 0 {
		spans = append(spans, span{"nodes.http_base_port", c.Nodes.HTTPBasePort})
	}
	n := c.Nodes.Count
	if len(spans) == 2 && spans[0].lo < spans[1].lo+n && spans[1].lo < spans[0].lo+n {
		return fmt.Errorf("nodes.grpc_base_port %d and nodes.http_base_port %d: with %d nodes (ports base…base+%d) the ranges overlap",
			spans[0].lo, spans[1].lo, n, n-1)
	}
	for _, a := range []struct{ field, addr string }{{"proxy.http_addr", c.Proxy.HTTPAddr}, {"proxy.grpc_addr", c.Proxy.GRPCAddr}} {
		p := portOf(a.addr)
		for _, s := range spans {
			if p >= s.lo && p < s.lo+n {
				return fmt.Errorf("%s %s: port %d is node %d's (%s %d)", a.field, a.addr, p, p-s.lo, s.field, s.lo)
			}
		}
	}
	return nil
}

// Emulated reports whether the nodes are emulated (everything printed must say so): emulated
// scorer nodes, or fakes of another server.
func (c *Config) Emulated() bool { return c.Nodes.Engine == "emulated" || c.Nodes.Fake() }

// KindScorer is our scorer node's kind (Nodes.Kind).
const KindScorer = "scorer"

// Fake reports whether the nodes are `bench fakerank` fakes of another server.
func (n *Nodes) Fake() bool { return n.Kind != "" && n.Kind != KindScorer }

// Node is one started node: a scorer node, or a fake server (Kind ≠ scorer, GRPCAddr "").
type Node struct {
	*Proc
	GRPCAddr, HTTPAddr string
	// Kind is the node's kind (Nodes.Kind).
	Kind string
	// bin and args are the child's binary and arguments, for a restart.
	bin  string
	args []string
	// Restarts counts how many times Supervise restarted it.
	Restarts int
}

// Cluster is a set of running children.
type Cluster struct {
	cfg      Config
	log      io.Writer
	mu       sync.Mutex
	nodes    []Node
	proxy    *Proc
	stopping bool // set by Stop: no more restarts
}

// New returns a cluster for cfg (validated) that reports progress to log.
func New(cfg Config, log io.Writer) (*Cluster, error) {
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Cluster{cfg: cfg, log: log}, nil
}

func (c *Cluster) bin(name string) string { return filepath.Join(c.cfg.BinDir, name) }

// ModelComplete reports whether dir holds a usable checkpoint.
func ModelComplete(dir string) bool {
	for _, f := range []string{"config.json", "tokenizer.json"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			return false
		}
	}
	m, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	return len(m) > 0
}

// EnsureModel generates the configured checkpoint unless a complete one is cached. It writes
// to a temporary folder and renames it, so an interrupted generation is never mistaken for a
// complete one.
func (c *Cluster) EnsureModel(ctx context.Context) error {
	dir := filepath.Clean(c.cfg.Model.Dir) // "models/x/" would put its temporary folder inside it
	if ModelComplete(dir) {
		if filepath.Base(dir) == c.cfg.Model.generatedName() {
			fmt.Fprintf(c.log, "model: using cached %s (%s)\n", dir, randomNote)
		} else {
			fmt.Fprintf(c.log, "model: using %s\n", dir)
		}
		return nil
	}
	if filepath.Base(dir) != c.cfg.Model.generatedName() {
		// Not a folder of ours (generated ones are named so, and written whole or not at all):
		// a download cut short or a checkpoint without tokenizer.json is the user's, never
		// replaced by random weights.
		if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
			return fmt.Errorf("model.dir %s: not a complete checkpoint (want config.json, tokenizer.json, *.safetensors); not replacing it with a generated one", dir)
		}
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("generate model: %w", err)
	}
	tmp := dir + ".tmp"
	_ = os.RemoveAll(tmp)
	fmt.Fprintf(c.log, "model: generating %s %s (seed %d) into %s …\n", c.cfg.Model.Preset, c.cfg.Model.Arch, c.cfg.Model.Seed, dir)
	start := time.Now()
	cmd := exec.CommandContext(ctx, c.bin("scorer"), "gen-model", "--arch", c.cfg.Model.Arch, "--preset", c.cfg.Model.Preset,
		"--seed", strconv.Itoa(c.cfg.Model.Seed), "--out", tmp)
	cmd.SysProcAttr = sysProcAttr()
	out, err := cmd.CombinedOutput()
	if err != nil {
		_ = os.RemoveAll(tmp)
		return fmt.Errorf("generate model: %s gen-model: %w\n%s", c.bin("scorer"), err, lastLines(string(out), 20))
	}
	if !ModelComplete(tmp) {
		_ = os.RemoveAll(tmp)
		return fmt.Errorf("generate model: gen-model wrote no complete checkpoint in %s (want config.json, tokenizer.json, *.safetensors)", tmp)
	}
	_ = os.RemoveAll(dir)
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("generate model: %w", err)
	}
	fmt.Fprintf(c.log, "model: generated in %v (%s)\n", time.Since(start).Round(100*time.Millisecond), randomNote)
	return nil
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return "  | " + strings.Join(l, "\n  | ")
}

// FreePort returns a port on host that is free now. It draws from 20000–32767, below Linux's
// ephemeral range (32768+), so a port handed to a child cannot meanwhile be taken by some
// process binding port 0 (tests, outgoing connections); ports already handed out by this
// process are never reused.
func FreePort(host string) (int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 200 {
		p := 20000 + rand.IntN(12768)
		if portsUsed[p] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p)))
		if err != nil {
			continue
		}
		l.Close()
		portsUsed[p] = true
		return p, nil
	}
	return 0, fmt.Errorf("no free port on %s in 20000–32767", host)
}

var (
	portsMu   sync.Mutex
	portsUsed = map[int]bool{}
)

func portAddr(host string, base, i int) (string, error) {
	if base == 0 {
		p, err := FreePort(host)
		if err != nil {
			return "", err
		}
		return net.JoinHostPort(host, strconv.Itoa(p)), nil
	}
	addr := net.JoinHostPort(host, strconv.Itoa(base+i))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("port %s is taken (another cluster still running?): %w", addr, err)
	}
	l.Close()
	return addr, nil
}

// StartNodes starts the nodes and waits until each answers /readyz (a fake: its health
// endpoint).
func (c *Cluster) StartNodes(ctx context.Context) error {
	n := c.cfg.Nodes
	if n.Fake() {
		return c.startFakes(ctx)
	}
	for i := range n.Count {
		g, err := portAddr(n.Host, n.GRPCBasePort, i)
		if err != nil {
			return err
		}
		h, err := portAddr(n.Host, n.HTTPBasePort, i)
		if err != nil {
			return err
		}
		id := fmt.Sprintf("node-%d", i)
		args := []string{"serve", "--grpc-addr", g, "--http-addr", h, "--node-id", id, "--engine", n.Engine}
		if n.Engine == "emulated" {
			args = append(args, "--cost-profile", n.CostProfile)
		} else {
			args = append(args, "--model", c.cfg.Model.Dir)
		}
		if n.Threads > 0 {
			args = append(args, "--threads", strconv.Itoa(n.Threads))
		}
		if n.MaxTokens > 0 {
			args = append(args, "--max-tokens", strconv.Itoa(n.MaxTokens))
		}
		if n.MoEPolicy != "" {
			args = append(args, "--moe-policy", n.MoEPolicy)
		}
		if n.CalibrationCache != "" {
			args = append(args, "--calibration-cache", n.CalibrationCache)
		}
		args = append(args, n.Args...)
		p, err := StartProc(id, c.bin("scorer"), args, filepath.Join(c.cfg.LogDir, id+".log"))
		if err != nil {
			return err
		}
		c.mu.Lock()
		c.nodes = append(c.nodes, Node{Proc: p, GRPCAddr: g, HTTPAddr: h, Kind: KindScorer, bin: c.bin("scorer"), args: args})
		c.mu.Unlock()
	}
	rctx, cancel := context.WithTimeout(ctx, c.cfg.ReadyTimeout)
	defer cancel()
	for _, nd := range c.Nodes() {
		if err := WaitReady(rctx, nd.Proc, "http://"+nd.HTTPAddr+"/readyz"); err != nil {
			return err
		}
	}
	return nil
}

// startFakes starts Count `bench fakerank` children of the configured kind and waits for
// their health endpoints.
func (c *Cluster) startFakes(ctx context.Context) error {
	n := c.cfg.Nodes
	conc := n.Concurrency
	if conc == 0 {
		conc = 1
	}
	for i := range n.Count {
		h, err := portAddr(n.Host, n.HTTPBasePort, i)
		if err != nil {
			return err
		}
		id := fmt.Sprintf("node-%d", i)
		// Each fake its own noise seed, as emulated scorer nodes differ.
		args := []string{"fakerank", "--kind", n.Kind, "--addr", h, "--cost-profile", n.CostProfile,
			"--concurrency", strconv.Itoa(conc), "--seed", strconv.Itoa(i + 1)}
		p, err := StartProc(id, c.bin("bench"), args, filepath.Join(c.cfg.LogDir, id+".log"))
		if err != nil {
			return err
		}
		c.mu.Lock()
		c.nodes = append(c.nodes, Node{Proc: p, HTTPAddr: h, Kind: n.Kind, bin: c.bin("bench"), args: args})
		c.mu.Unlock()
	}
	rctx, cancel := context.WithTimeout(ctx, c.cfg.ReadyTimeout)
	defer cancel()
	for _, nd := range c.Nodes() {
		if err := WaitReady(rctx, nd.Proc, "http://"+nd.HTTPAddr+fakerank.HealthPath(nd.Kind)); err != nil {
			return err
		}
	}
	return nil
}

// Nodes returns the started nodes.
func (c *Cluster) Nodes() []Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Node(nil), c.nodes...)
}

// NodeAddrs returns the scorer nodes' gRPC addresses (none for fake nodes: see Backends).
func (c *Cluster) NodeAddrs() []string {
	var a []string
	for _, n := range c.Nodes() {
		if n.Kind == KindScorer || n.Kind == "" {
			a = append(a, n.GRPCAddr)
		}
	}
	return a
}

// Backends returns the fake nodes as the proxy's proxy.nodes.backends entries (none for scorer
// nodes).
func (c *Cluster) Backends() []backend.Spec {
	var specs []backend.Spec
	for _, n := range c.Nodes() {
		if n.Kind != KindScorer && n.Kind != "" {
			specs = append(specs, backend.Spec{Kind: n.Kind, Addr: n.HTTPAddr})
		}
	}
	return specs
}

// WriteProxyConfig writes to path the proxy config file base ("": the proxy's defaults) with
// proxy.nodes.backends set to specs (and proxy.nodes.static and dns removed), so the proxy
// reaches exactly these nodes. Only kind and addr of each spec are written.
func WriteProxyConfig(path, base string, specs []backend.Spec) error {
	doc := map[string]any{}
	if base != "" {
		b, err := os.ReadFile(base)
		if err != nil {
			return fmt.Errorf("proxy config: %w", err)
		}
		if err := yaml.Unmarshal(b, &doc); err != nil {
			return fmt.Errorf("proxy config %s: %w", base, err)
		}
		if doc == nil {
			doc = map[string]any{}
		}
	}
	sub := func(m map[string]any, key string) (map[string]any, error) {
		switch v := m[key].(type) {
		case nil:
			n := map[string]any{}
			m[key] = n
			return n, nil
		case map[string]any:
			return v, nil
		default:
			return nil, fmt.Errorf("proxy config %s: %s is not a mapping", base, key)
		}
	}
	px, err := sub(doc, "proxy")
	if err != nil {
		return err
	}
	nodes, err := sub(px, "nodes")
	if err != nil {
		return err
	}
	delete(nodes, "static")
	delete(nodes, "dns")
	list := make([]any, len(specs))
	for i, s := range specs {
		list[i] = map[string]any{"kind": s.Kind, "addr": s.Addr}
	}
	nodes["backends"] = list
	out, err := yaml.Marshal(doc)
	if err != nil {
		return fmt.Errorf("proxy config: %w", err)
	}
	from := base
	if from == "" {
		from = "the proxy's defaults"
	}
	head := fmt.Sprintf("# Written by bench cluster: %s, with proxy.nodes.backends = the cluster's %d fake nodes (EMULATED).\n", from, len(specs))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("proxy config: %w", err)
	}
	return os.WriteFile(path, append([]byte(head), out...), 0o644)
}

// ProxyArgs are the proxy's flags for config p in front of nodes (scorer gRPC addresses; none:
// no --nodes, the nodes come from p.Config).
func ProxyArgs(p Proxy, nodes []string) []string {
	args := []string{"serve", "--http-addr", p.HTTPAddr, "--grpc-addr", p.GRPCAddr}
	if len(nodes) > 0 {
		args = append(args, "--nodes", strings.Join(nodes, ","))
	}
	if p.Config != "" {
		args = append(args, "--config", p.Config)
	}
	if p.Split != "" {
		args = append(args, "--split", p.Split)
	}
	if p.Route != "" {
		args = append(args, "--route", p.Route)
	}
	if p.Hedge {
		args = append(args, "--hedge")
	}
	if p.SLO > 0 {
		args = append(args, "--slo", p.SLO.String())
	}
	if p.TokenCounter != "" {
		args = append(args, "--token-counter", p.TokenCounter)
	}
	return append(args, p.Args...)
}

// StartProxy starts a proxy with config p in front of the running nodes (replacing a running
// proxy: compare restarts it per configuration) and waits for its /readyz. In front of fake
// nodes it gets --config <log dir>/<logName>.yaml: p.Config with the fakes as
// proxy.nodes.backends (WriteProxyConfig).
func (c *Cluster) StartProxy(ctx context.Context, p Proxy, logName string) error {
	c.StopProxy()
	if _, err := portAddr(hostOf(p.HTTPAddr), portOf(p.HTTPAddr), 0); err != nil {
		return fmt.Errorf("proxy http_addr: %w", err)
	}
	if _, err := portAddr(hostOf(p.GRPCAddr), portOf(p.GRPCAddr), 0); err != nil {
		return fmt.Errorf("proxy grpc_addr: %w", err)
	}
	if specs := c.Backends(); len(specs) > 0 {
		path := filepath.Join(c.cfg.LogDir, logName+".yaml")
		if err := WriteProxyConfig(path, p.Config, specs); err != nil {
			return err
		}
		p.Config = path
	}
	proc, err := StartProc("proxy", c.bin("proxy"), ProxyArgs(p, c.NodeAddrs()), filepath.Join(c.cfg.LogDir, logName+".log"))
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.proxy = proc
	c.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, c.cfg.ReadyTimeout)
	defer cancel()
	return WaitReady(rctx, proc, "http://"+p.HTTPAddr+"/readyz")
}

func hostOf(addr string) string { h, _, _ := net.SplitHostPort(addr); return h }
func portOf(addr string) int {
	_, p, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(p)
	return n
}

// StopProxy stops the proxy if one runs.
func (c *Cluster) StopProxy() {
	c.mu.Lock()
	p := c.proxy
	c.proxy = nil
	c.mu.Unlock()
	if p != nil {
		p.Stop(5 * time.Second)
	}
}

// Stop stops the proxy, then the nodes (in parallel).
func (c *Cluster) Stop() {
	c.mu.Lock()
	c.stopping = true
	c.mu.Unlock()
	c.StopProxy()
	var wg sync.WaitGroup
	for _, n := range c.Nodes() {
		wg.Add(1)
		go func() { defer wg.Done(); n.Stop(10 * time.Second) }()
	}
	wg.Wait()
}

// Wait blocks until ctx ends (nil) or a child exits (an error carrying its last log lines).
func (c *Cluster) Wait(ctx context.Context) error {
	procs := []*Proc{}
	for _, n := range c.Nodes() {
		procs = append(procs, n.Proc)
	}
	c.mu.Lock()
	if c.proxy != nil {
		procs = append(procs, c.proxy)
	}
	c.mu.Unlock()
	died := make(chan *Proc, len(procs))
	stop := make(chan struct{})
	defer close(stop)
	for _, p := range procs {
		go func() {
			select {
			case <-p.Done():
				died <- p
			case <-stop:
			}
		}()
	}
	select {
	case <-ctx.Done():
		return nil
	case p := <-died:
		return errors.New(p.Describe())
	}
}

// Supervise blocks until ctx ends (nil) or the proxy exits (an error carrying its last log lines).
// A scorer node that exits meanwhile is reported with its last lines and restarted with the same
// arguments (and ports) after a pause that starts at RestartDelay and doubles, up to 30 s, while
// it keeps dying within a minute of its start; the other nodes keep serving, and the proxy's
// health watch takes the node out of and back into traffic. Its previous log is kept as
// node-i.log.1.
func (c *Cluster) Supervise(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	// The node watchers end with ctx: cancel it before waiting for them (in the other order, the
	// proxy's exit left Supervise waiting until the caller's context ended).
	defer func() {
		cancel()
		wg.Wait()
	}()
	for i := range c.Nodes() {
		wg.Go(func() { c.keepNode(ctx, i) })
	}
	c.mu.Lock()
	p := c.proxy
	c.mu.Unlock()
	if p == nil {
		<-ctx.Done()
		return nil
	}
	select {
	case <-ctx.Done():
		return nil
	case <-p.Done():
		return errors.New(p.Describe())
	}
}

// RestartDelay is the first pause before a dead node is restarted.
var RestartDelay = time.Second

// keepNode restarts node i whenever it exits, until ctx ends or the cluster stops.
func (c *Cluster) keepNode(ctx context.Context, i int) {
	delay := RestartDelay
	startFailed := false // the last restart did not start: node-i.log is its empty file, not the dead node's
	for {
		c.mu.Lock()
		nd := c.nodes[i]
		c.mu.Unlock()
		started := time.Now()
		select {
		case <-ctx.Done():
			return
		case <-nd.Done():
		}
		c.mu.Lock()
		stopping := c.stopping
		c.mu.Unlock()
		if stopping {
			return
		}
		if time.Since(started) > time.Minute {
			delay = RestartDelay
		}
		// Describe ends with the log's last lines, one per line: the restart gets a line of its own.
		fmt.Fprintf(c.log, "cluster: %scluster: restarting %s in %v (the other nodes keep serving; its log so far is kept as %s.log.1)\n",
			nd.Describe(), nd.Name, delay, nd.Name)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		delay = min(2*delay, 30*time.Second)
		logPath := filepath.Join(c.cfg.LogDir, nd.Name+".log")
		if !startFailed {
			_ = os.Rename(logPath, logPath+".1")
		}
		c.mu.Lock()
		if c.stopping {
			c.mu.Unlock()
			return
		}
		p, err := StartProc(nd.Name, nd.bin, nd.args, logPath)
		startFailed = err != nil
		if err != nil {
			c.mu.Unlock()
			fmt.Fprintf(c.log, "cluster: restart %s: %v\n", nd.Name, err)
			continue // the old, exited process stays in place: Done is closed, so this retries after the next delay
		}
		c.nodes[i].Proc = p
		c.nodes[i].Restarts++
		c.mu.Unlock()
		fmt.Fprintf(c.log, "cluster: %s restarted (pid %d)\n", nd.Name, p.Pid())
	}
}
