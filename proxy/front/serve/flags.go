package serve

import (
	"flag"
	"strings"
	"time"

	"github.com/relevance-scoring/relevance/proxy"
)

// Flags are the command-line flags of `proxy serve` (a contract the bench and cluster tools rely
// on). Only flags given on the command line override the file.
type Flags struct {
	fs *flag.FlagSet

	Config        string
	HTTPAddr      string
	GRPCAddr      string
	Nodes         string
	DNS           string
	Split         string
	Route         string
	Hedge         bool
	SLO           time.Duration
	TokenCounter  string
	MaxBatchItems int
	LogLevel      string
}

// RegisterFlags defines the serve flags on fs.
func RegisterFlags(fs *flag.FlagSet) *Flags {
	f := &Flags{fs: fs}
	fs.StringVar(&f.Config, "config", "", "YAML config file (default: built-in defaults; see configs/proxy.yaml)")
	fs.StringVar(&f.HTTPAddr, "http-addr", "", "HTTP listen address host:port (default 127.0.0.1:8080)")
	fs.StringVar(&f.GRPCAddr, "grpc-addr", "", "gRPC listen address host:port (default 127.0.0.1:9090)")
	fs.StringVar(&f.Nodes, "nodes", "", "comma-separated scorer node addresses host:port,host:port (replaces proxy.nodes.static)")
	fs.StringVar(&f.DNS, "dns", "", "NAME:PORT re-resolved periodically to the scorer nodes (a headless service)")
	fs.StringVar(&f.Split, "split", "", "splitting strategy: one of "+strings.Join(proxy.SplitStrategies(), ", "))
	fs.StringVar(&f.Route, "route", "", "routing strategy: one of "+strings.Join(proxy.RouteStrategies(), ", "))
	fs.BoolVar(&f.Hedge, "hedge", false, "hedge straggling batches (--hedge=false turns it off)")
	fs.DurationVar(&f.SLO, "slo", 0, "budget of a request that brings no deadline, e.g. 500ms")
	fs.StringVar(&f.TokenCounter, "token-counter", "", "token counter: exact or estimate")
	fs.IntVar(&f.MaxBatchItems, "max-batch-items", 0, "most items per batch")
	fs.StringVar(&f.LogLevel, "log-level", "", "debug, info, warn or error")
	return f
}

// Load reads --config (or starts from the defaults) and applies the flags that were set. The
// result still needs Validate.
func (f *Flags) Load() (Config, error) {
	cfg := DefaultConfig()
	if f.Config != "" {
		var err error
		if cfg, err = Load(f.Config); err != nil {
			return cfg, err
		}
	}
	f.Apply(&cfg)
	return cfg, nil
}

// Apply overrides cfg with the flags given on the command line (flag.FlagSet.Visit), so that an
// unset flag never resets a value from the file.
func (f *Flags) Apply(cfg *Config) {
	f.fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "http-addr":
			cfg.HTTP.Addr = f.HTTPAddr
		case "grpc-addr":
			cfg.GRPC.Addr = f.GRPCAddr
		case "nodes":
			cfg.Proxy.Nodes.Static = splitList(f.Nodes)
		case "dns":
			cfg.Proxy.Nodes.DNS = f.DNS
		case "split":
			cfg.Proxy.Split.Strategy = f.Split
		case "route":
			cfg.Proxy.Route.Strategy = f.Route
		case "hedge":
			cfg.Proxy.Hedge.Enabled = f.Hedge
		case "slo":
			cfg.Proxy.SLO = f.SLO
		case "token-counter":
			cfg.Proxy.Cost.TokenCounter = f.TokenCounter
		case "max-batch-items":
			cfg.Proxy.Split.MaxBatchItems = f.MaxBatchItems
		case "log-level":
			cfg.LogLevel = f.LogLevel
		}
	})
}

func splitList(s string) []string {
	var out []string
	for p := range strings.SplitSeq(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
