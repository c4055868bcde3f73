package httpapi

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"
)

// TestContentLengthWithChunkedIsRefusedAndClosed: a request with both Content-Length and
// Transfer-Encoding: chunked is framed differently by a server that reads one and an
// intermediary that reads the other — the request smuggling pattern. RFC 9112 §6.1: "the server
// MUST close the connection after responding to such a request". fasthttp reads the chunked body
// and kept the connection open: the bytes an intermediary framed by Content-Length would have
// taken as the next request's were answered as one. Both orders of the two headers.
func TestContentLengthWithChunkedIsRefusedAndClosed(t *testing.T) {
	e := startServer(t, DefaultConfig(), newFakeCore(), nil)
	body := `{"query":"q","documents":["apple"]}`
	chunked := fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body)
	for _, headers := range []string{
		"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n",
		"Transfer-Encoding: chunked\r\nContent-Length: 4\r\n",
	} {
		t.Run(fmt.Sprintf("%q", headers), func(t *testing.T) {
			conn := dialRaw(t, e.addr)
			_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
			// The smuggled request follows on the same connection.
			if _, err := io.WriteString(conn, "POST /v1/rerank HTTP/1.1\r\nHost: test\r\n"+headers+"\r\n"+chunked+
				"GET /healthz HTTP/1.1\r\nHost: test\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("read reply: %v", err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest {
				t.Errorf("status = %d, want 400", resp.StatusCode)
			}
			if !resp.Close {
				t.Error("reply does not close the connection")
			}
			if next, err := http.ReadResponse(br, nil); err == nil {
				next.Body.Close()
				t.Errorf("the request after it on the connection was answered too (%d)", next.StatusCode)
			}
		})
	}
}
