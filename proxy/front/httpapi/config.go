package httpapi

import (
	"fmt"
	"net"
	"time"
)

// Config is the HTTP front's section of the proxy configuration (`http:` in configs/proxy.yaml).
type Config struct {
	// Addr is the listen address, host:port. Port 0 picks a free port.
	Addr string `yaml:"addr"`
	// MaxBodyBytes is the largest request body accepted; larger bodies get 413. Must be > 0.
	MaxBodyBytes int `yaml:"max_body_bytes"`
	// ReadTimeout bounds reading one whole request (headers and body). 0 means no limit.
	ReadTimeout time.Duration `yaml:"read_timeout"`
	// WriteTimeout bounds writing one response. 0 means no limit.
	WriteTimeout time.Duration `yaml:"write_timeout"`
	// IdleTimeout is how long a keep-alive connection may wait for its next request; 0 means
	// ReadTimeout.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// DrainIdleGrace is how long a drain keeps keep-alive connections open after it stops
	// accepting, before it closes those still idle; it ends sooner once every connection has
	// closed, and takes at most half of shutdown.timeout. From the signal on (through
	// shutdown.delay too) every reply carries Connection: close. 0: idle connections are closed
	// at once, and a request a client sends on one at that moment is reset.
	DrainIdleGrace time.Duration `yaml:"drain_idle_grace"`
}

// DefaultConfig returns the defaults: 127.0.0.1:8080, 8 MiB bodies (1000 items of ~8 KB),
// 10 s read and write timeouts, 60 s idle timeout, 1 s drain grace for idle connections.
func DefaultConfig() Config {
	return Config{
		Addr:           "127.0.0.1:8080",
		MaxBodyBytes:   8 << 20,
		ReadTimeout:    10 * time.Second,
		WriteTimeout:   10 * time.Second,
		IdleTimeout:    60 * time.Second,
		DrainIdleGrace: time.Second,
	}
}

// Validate reports the first bad field, named as in the YAML file under "http.".
func (c Config) Validate() error {
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return fmt.Errorf("http.addr: must be host:port, got %q", c.Addr)
	}
	if c.MaxBodyBytes <= 0 {
		return fmt.Errorf("http.max_body_bytes: must be > 0, got %d", c.MaxBodyBytes)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"read_timeout", c.ReadTimeout}, {"write_timeout", c.WriteTimeout}, {"idle_timeout", c.IdleTimeout}, {"drain_idle_grace", c.DrainIdleGrace}} {
		if d.v < 0 {
			return fmt.Errorf("http.%s: must be >= 0, got %s", d.name, d.v)
		}
	}
	return nil
}
