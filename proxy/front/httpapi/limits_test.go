package httpapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
)

// TestDocumentArraysOverTheItemLimitStopDecoding: a rerank, TEI or vLLM score body with more
// documents than the item limit is refused naming the field, after decoding one entry past the
// limit rather than all of them: an 8 MiB body of empty strings (2.8 million documents) allocated
// ~790 MiB (rerank) and ~840 MiB (vLLM score) before the limit refused it. Documents within the
// limit still decode, and a number where the list belongs is still an error naming the field.
func TestDocumentArraysOverTheItemLimitStopDecoding(t *testing.T) {
	n := (8<<20 - 64) / 3
	many := `[` + strings.Repeat(`"",`, n-1) + `""]`
	for _, c := range []struct {
		field string
		parse func(body []byte, limit int) error
	}{
		{"documents", func(b []byte, l int) error { _, _, _, err := parseRerank(b, l); return err }},
		{"texts", func(b []byte, l int) error { _, _, _, err := parseTEI(b, l); return err }},
		{"text_2", func(b []byte, l int) error { _, err := parseVLLMScore(b, l); return err }},
	} {
		body := []byte(`{"query":"q","text_1":"q","` + c.field + `":` + many + `}`)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		err := c.parse(body, 1000)
		runtime.ReadMemStats(&after)
		var f *badInput
		if !errors.As(err, &f) || f.field != c.field || !strings.Contains(f.problem, "limit 1000") {
			t.Errorf("%d %s: err %v, want one naming %s and its limit", n, c.field, err, c.field)
		}
		if mb := (after.TotalAlloc - before.TotalAlloc) >> 20; mb > 32 {
			t.Errorf("%d %s: %d MiB allocated to refuse an 8 MiB body, want under 32", n, c.field, mb)
		}
		if err := c.parse([]byte(`{"query":"q","text_1":"q","`+c.field+`":["a","b"]}`), 2); err != nil {
			t.Errorf("%s within the limit: %v", c.field, err)
		}
		err = c.parse([]byte(`{"query":"q","text_1":"q","`+c.field+`":7}`), 2)
		if !errors.As(err, &f) || f.field != c.field || !strings.Contains(f.problem, "number") {
			t.Errorf("%s as a string: %v, want a type error naming it", c.field, err)
		}
	}
}

// TestErrorRepliesEchoTheRequestID: the caller's X-Request-Id comes back on an error reply (a
// 422 for a bad body, a 429 from the core), not only on a 200, so that a client can find the
// failures in its logs and ours.
func TestErrorRepliesEchoTheRequestID(t *testing.T) {
	core := newFakeCore()
	e := startServer(t, DefaultConfig(), core, nil)
	id := map[string]string{HeaderRequestID: "abc-123"}
	for _, c := range []struct{ path, body string }{
		{"/v1/rerank", `{"query":"q","documents":[]}`},
		{"/v2/rerank", `{"query":"q"}`},
		{"/rerank", `{"query":"q","texts":"a"}`},
		{"/v1/score", `{"query":"q","items":[]}`},
	} {
		r := e.do(t, "POST", c.path, c.body, id)
		if r.code < 400 || r.header.Get(HeaderRequestID) != "abc-123" {
			t.Errorf("%s %s: %d with %s %q, want an error with abc-123", c.path, c.body, r.code, HeaderRequestID, r.header.Get(HeaderRequestID))
		}
	}
}

// TestErrorRepliesWithoutACallerIDGetOne: a caller that sent no X-Request-Id still gets one on
// every reply, errors included (the README promises it "either way").
func TestErrorRepliesWithoutACallerIDGetOne(t *testing.T) {
	core := newFakeCore()
	e := startServer(t, DefaultConfig(), core, nil)
	for _, c := range []struct {
		path, body string
		header     map[string]string
	}{
		{"/v1/rerank", `{"query":"q","documents":[]}`, nil},
		{"/v2/rerank", `{"query":"q"}`, nil},
		{"/v1/rerank", `{"query":"q","documents":["a"]}`, map[string]string{HeaderTimeout: "soon"}},
		{"/v1/score", `not json`, nil},
	} {
		r := e.do(t, "POST", c.path, c.body, c.header)
		if r.code < 400 || len(r.header.Get(HeaderRequestID)) < 16 {
			t.Errorf("%s %s: %d with %s %q, want an error with a generated id", c.path, c.body, r.code, HeaderRequestID, r.header.Get(HeaderRequestID))
		}
	}
}

// TestStalledBodyHoldsOnlyWhatArrived: a client that sends the headers of an 8 MiB body and a few
// bytes of it, then stalls, holds about what it sent, not the length its header claims (20 such
// connections held 160 MiB when the body was made at its announced length).
func TestStalledBodyHoldsOnlyWhatArrived(t *testing.T) {
	e := startServer(t, DefaultConfig(), newFakeCore(), nil)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range 20 {
		c, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		fmt.Fprintf(c, "POST /v1/rerank HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", 8<<20, strings.Repeat(" ", 8<<10))
	}
	// Let every connection's handler take its first bytes. (Not a timing assertion: a slower
	// machine lets the old behaviour pass, never the new one fail.)
	time.Sleep(500 * time.Millisecond)
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapInuse) - int64(before.HeapInuse); grew > 64<<20 {
		t.Errorf("20 stalled 8 MiB bodies (8 KiB sent each) grew the heap in use by %d MiB, want under 64", grew>>20)
	}
}

// TestCorePanicInAScoreQueryIsA500: a vLLM score body of several queries runs them on goroutines
// of their own; a panic in the core on one of them is answered 500 like a panic on any other
// route, and the server goes on serving (it used to end the process).
func TestCorePanicInAScoreQueryIsA500(t *testing.T) {
	core := newFakeCore()
	core.fn = func(ctx context.Context, req *relevancev1.ScoreRequest) (*relevancev1.ScoreResponse, error) {
		if req.GetQuery() == "boom" {
			panic("core bug")
		}
		return defaultScores(req), nil
	}
	e := startServer(t, DefaultConfig(), core, nil)
	r := e.do(t, "POST", "/score", `{"text_1":["fine","boom"],"text_2":["a","b"]}`, nil)
	if r.code != 500 {
		t.Errorf("a core panic on one query: %d %s, want 500", r.code, r.body)
	}
	core.fn = nil
	if r := e.do(t, "POST", "/score", `{"text_1":"q","text_2":["a","b"]}`, nil); r.code != 200 {
		t.Errorf("after the panic: %d %s, want 200", r.code, r.body)
	}
}

// TestBodyReadAsItArrivesEndsAtItsLength: a whole body read as it arrives ends in a buffer of its
// own length (bytes.Buffer ended an 8 MiB body in 16 MiB, after 32 MiB of allocation), however
// the stream hands it over, and a body cut short is an unexpected EOF.
func TestBodyReadAsItArrivesEndsAtItsLength(t *testing.T) {
	const cl = 8 << 20
	body := []byte(strings.Repeat("x", cl))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	b, err := readAsItArrives(iotest.HalfReader(bytes.NewReader(body)), cl)
	runtime.ReadMemStats(&after)
	if err != nil || !bytes.Equal(b, body) || cap(b) != cl {
		t.Fatalf("read %d bytes (cap %d), err %v; want the %d bytes in a buffer of that size", len(b), cap(b), err, cl)
	}
	if mb := (after.TotalAlloc - before.TotalAlloc) >> 20; mb > 17 {
		t.Errorf("%d MiB allocated to read an 8 MiB body, want at most twice its size", mb)
	}
	if _, err := readAsItArrives(bytes.NewReader(body[:100]), 200); err != io.ErrUnexpectedEOF {
		t.Errorf("a body cut short: %v, want unexpected EOF", err)
	}
}

// TestScoreItemsCountedBeforeDecoding: a /v1/score body's items are counted on its bytes before
// protojson builds them (8 MiB of {} items took ~420 MiB): over the limit it is refused naming
// items, with little allocated; the count reads only the top-level "items" array, whatever
// strings, escapes and nested values hold.
func TestScoreItemsCountedBeforeDecoding(t *testing.T) {
	for _, c := range []struct {
		body string
		want int
	}{
		{`{"query":"q","items":[]}`, 0},
		{`{"query":"q","items":[{"text":"a"}]}`, 1},
		{`{"items" : [ {"text":"a,b]"} , {"text":"\"],["} , {} ] , "query":"items"}`, 3},
		{`{"options":{"items":[1,2,3]},"query":"[\"items\",","items":[{"id":"x","text":"y"},{}]}`, 2},
		{`{"query":"q"}`, 0},
	} {
		if got := topLevelArrayLen([]byte(c.body), "items", 100); got != c.want {
			t.Errorf("%s: %d items, want %d", c.body, got, c.want)
		}
	}
	n := (8<<20 - 64) / 3
	body := []byte(`{"query":"q","items":[` + strings.Repeat(`{},`, n-1) + `{}]}`)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := decodeScore(body, 1000)
	runtime.ReadMemStats(&after)
	var f *badInput
	if !errors.As(err, &f) || f.field != "items" || !strings.Contains(f.problem, "limit 1000") {
		t.Errorf("%d items: %v, want one naming items and its limit", n, err)
	}
	if mb := (after.TotalAlloc - before.TotalAlloc) >> 20; mb > 16 {
		t.Errorf("%d MiB allocated to refuse an 8 MiB body, want under 16", mb)
	}
	if _, err := decodeScore([]byte(`{"query":"q","items":[{"text":"a"},{"text":"b"}]}`), 2); err != nil {
		t.Errorf("two items, limit 2: %v", err)
	}
}
