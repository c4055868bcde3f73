// Package serve runs the proxy process: it holds the whole file configuration (configs/proxy.yaml:
// the two fronts, the core, logging and shutdown) and Run, which builds the core, serves the HTTP
// and gRPC fronts and drains them on cancellation. cmd/proxy is a thin main over it.
//
// Config values are plain data; Run is called once per process.
package serve

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/relevance-scoring/relevance/internal/yamlconf"
	"github.com/relevance-scoring/relevance/proxy"
	"github.com/relevance-scoring/relevance/proxy/front/grpcapi"
	"github.com/relevance-scoring/relevance/proxy/front/httpapi"
)

// Config is the proxy's file configuration. Start from DefaultConfig, then Parse or Load over it,
// apply flags, then Validate.
type Config struct {
	// HTTP is the HTTP front (rerank and score APIs, health, metrics).
	HTTP httpapi.Config `yaml:"http"`
	// GRPC is the gRPC front (relevance.v1.Ranker, health, reflection).
	GRPC grpcapi.Config `yaml:"grpc"`
	// Proxy is the core: nodes, splitting, routing, breakers, retries, hedging, admission, cost.
	Proxy proxy.Config `yaml:"proxy"`
	// LogLevel is debug, info (default), warn or error.
	LogLevel string `yaml:"log_level"`
	// LogFormat is text (default) or json.
	LogFormat string `yaml:"log_format"`
	// Shutdown bounds the drain on SIGTERM/SIGINT.
	Shutdown ShutdownConfig `yaml:"shutdown"`
}

// ShutdownConfig is the drain on SIGTERM/SIGINT.
type ShutdownConfig struct {
	// Delay is how long readiness reports false before the listeners close, so that load
	// balancers stop sending first (Kubernetes: a few seconds). 0: close at once.
	Delay time.Duration `yaml:"delay"`
	// Timeout bounds waiting for in-flight requests after the listeners close; then they are
	// cancelled. Must be > 0. Default 10s.
	Timeout time.Duration `yaml:"timeout"`
}

// DefaultConfig returns every default: HTTP on 127.0.0.1:8080, gRPC on 127.0.0.1:9090, the
// core's defaults (no nodes: the file or flags must name some), info logs as text, a 10 s drain.
func DefaultConfig() Config {
	return Config{
		HTTP:      httpapi.DefaultConfig(),
		GRPC:      grpcapi.DefaultConfig(),
		Proxy:     proxy.DefaultConfig(),
		LogLevel:  "info",
		LogFormat: "text",
		Shutdown:  ShutdownConfig{Timeout: 10 * time.Second},
	}
}

// Parse decodes YAML over DefaultConfig. Unknown keys are errors (a misspelt key would otherwise
// silently keep its default). It does not Validate: flags may still fill in fields.
func Parse(b []byte) (Config, error) {
	cfg := DefaultConfig()
	if err := yamlconf.Decode(b, &cfg); err != nil {
		return cfg, fmt.Errorf("parse config: %w", err)
	}
	return cfg, nil
}

// Load reads and parses a YAML file (see Parse).
func Load(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return DefaultConfig(), fmt.Errorf("load config: %w", err)
	}
	cfg, err := Parse(b)
	if err != nil {
		return cfg, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// Validate reports every bad field, named by its YAML path with the bad value.
func (c *Config) Validate() error {
	var errs []error
	errs = append(errs, c.HTTP.Validate(), c.GRPC.Validate(), c.Proxy.Validate())
	if _, err := c.Level(); err != nil {
		errs = append(errs, err)
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		errs = append(errs, fmt.Errorf("log_format: must be text or json, got %q", c.LogFormat))
	}
	if c.Shutdown.Delay < 0 {
		errs = append(errs, fmt.Errorf("shutdown.delay: must be >= 0, got %s", c.Shutdown.Delay))
	}
	if c.Shutdown.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("shutdown.timeout: must be > 0, got %s", c.Shutdown.Timeout))
	}
	return errors.Join(errs...)
}

// Level is LogLevel as a slog.Level.
func (c *Config) Level() (slog.Level, error) {
	var l slog.Level
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
		if err := l.UnmarshalText([]byte(c.LogLevel)); err == nil {
			return l, nil
		}
	}
	return l, fmt.Errorf("log_level: must be debug, info, warn or error, got %q", c.LogLevel)
}

// NewLogger returns the slog logger the config asks for, writing to w.
func (c *Config) NewLogger(w io.Writer) (*slog.Logger, error) {
	level, err := c.Level()
	if err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: level}
	if c.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return slog.New(slog.NewTextHandler(w, opts)), nil
}
