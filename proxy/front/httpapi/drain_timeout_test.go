package httpapi

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"
)

// TestIdleOnlyDrainEndsWithinItsTimeout: a drain with no request in flight, only a client's idle
// keep-alive connection (every pooled HTTP client keeps one), and a timeout (shutdown.timeout)
// not longer than http.drain_idle_grace, succeeds: the grace takes at most half the timeout.
// It used to wait out the whole timeout for the client to close and then report the drain as
// timed out, cancelling calls that did not exist.
func TestIdleOnlyDrainEndsWithinItsTimeout(t *testing.T) {
	for _, grace := range []time.Duration{0, 5 * time.Second} {
		t.Run(fmt.Sprint("grace=", grace), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.DrainIdleGrace = grace
			e := startServer(t, cfg, newFakeCore(), nil)
			conn := dialRaw(t, e.addr)
			br := bufio.NewReader(conn)
			body := `{"query":"q","documents":["apple"]}`
			fmt.Fprintf(conn, "POST /v1/rerank HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			// The connection is now idle, kept alive by the client.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			start := time.Now()
			err = e.srv.Shutdown(ctx)
			t.Logf("Shutdown took %v: %v; baseCtx err %v", time.Since(start), err, e.srv.baseCtx.Err())
			if err != nil {
				t.Errorf("drain with nothing in flight, an idle keep-alive connection, timeout 2 s, drain_idle_grace %v: %v", grace, err)
			}
		})
	}
}
