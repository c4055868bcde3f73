package faults

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/relevance-scoring/relevance/bench/cluster"
	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
)

// mcase is one malformed input and what a correct server answers.
type mcase struct {
	name string
	// HTTP: route and body; gRPC: method and the raw message bytes.
	route  string // "/v1/rerank", … or a gRPC full method
	grpc   bool
	toNode bool // gRPC straight to a scorer node (ScoreBatch), not through the proxy
	body   []byte
	// want: the acceptable HTTP statuses, or the gRPC code.
	status []int
	code   codes.Code
	// field must appear in the error's message; "" accepts any message (bytes that are not JSON
	// name no field).
	field string
	// early: the server may answer before it has read the whole body (over its size limit), so
	// the body is sent as a client that reads while it writes would (curl), not as net/http does.
	early bool
}

// mresult is what one case got.
type mresult struct {
	c       mcase
	status  int // HTTP
	code    codes.Code
	message string
	err     error // transport failure
}

func (m mresult) ok() bool {
	if m.err != nil {
		return false
	}
	if m.c.grpc {
		if m.code != m.c.code {
			return false
		}
	} else if !slices.Contains(m.c.status, m.status) {
		return false
	}
	if m.message == "" {
		return false
	}
	return m.c.field == "" || strings.Contains(m.message, m.c.field)
}

func (m mresult) String() string {
	got := ""
	switch {
	case m.err != nil:
		got = "transport error: " + m.err.Error()
	case m.c.grpc:
		got = fmt.Sprintf("%v %q", m.code, m.message)
	default:
		got = fmt.Sprintf("%d %q", m.status, m.message)
	}
	want := ""
	if m.c.grpc {
		want = m.c.code.String()
	} else {
		want = fmt.Sprint(m.c.status)
	}
	if m.c.field != "" {
		want += " naming " + m.c.field
	}
	return fmt.Sprintf("%s %s: got %s, want %s", m.c.route, m.c.name, truncate(got, 240), want)
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

const badUTF8 = "bad \xff\xfe utf8 \xc3"

// Size limits of the proxy's defaults (configs/proxy.yaml limits and http.max_body_bytes).
const (
	maxQueryBytes = 8192
	maxItemBytes  = 65536
	maxItems      = 1000
	maxBodyBytes  = 8 << 20
)

var (
	s400    = []int{400}
	s4xx    = []int{400, 422}
	s413    = []int{413}
	s404    = []int{404}
	methodR = "/relevance.v1.Ranker/Score"
	methodS = "/relevance.v1.Scorer/ScoreBatch"
)

// rerankCases are the malformed bodies of one rerank route (Jina/vLLM or Cohere shape).
func rerankCases(route string) []mcase {
	var out []mcase
	base := func() map[string]any {
		m := map[string]any{"query": "wireless earbuds", "documents": []any{"Acme earbuds, 30 h battery", map[string]any{"text": "Steel water bottle"}}}
		if route == "/v2/rerank" {
			m["model"] = "rerank"
		}
		return m
	}
	with := func(name string, status []int, field string, edit func(m map[string]any)) {
		m := base()
		edit(m)
		b, err := json.Marshal(m)
		if err != nil {
			panic(err)
		}
		out = append(out, mcase{name: name, route: route, body: b, status: status, field: field})
	}
	raw := func(name string, status []int, field string, body string) {
		out = append(out, mcase{name: name, route: route, body: []byte(body), status: status, field: field})
	}
	// Wrong types, field by field.
	wrong := map[string][]any{
		"query":              {1, true, []any{}, map[string]any{}},
		"instruction":        {1, false, []any{"x"}},
		"model":              {1, true, map[string]any{}},
		"top_n":              {"3", true, 1.5, 1e30, []any{}},
		"return_documents":   {"yes", 1, []any{}},
		"max_tokens_per_doc": {"many", 2.5, false},
		"documents":          {"one doc", 1, map[string]any{}, true},
	}
	for _, f := range []string{"query", "instruction", "model", "top_n", "return_documents", "max_tokens_per_doc", "documents"} {
		for _, v := range wrong[f] {
			with(fmt.Sprintf("%s is %T %v", f, v, v), s4xx, f, func(m map[string]any) { m[f] = v })
		}
	}
	for i, v := range []any{1, true, nil, []any{}, map[string]any{"text": 1}, map[string]any{}, map[string]any{"text": nil}, map[string]any{"text": []any{"x"}}} {
		with(fmt.Sprintf("documents[1] is %T %v (%d)", v, v, i), s4xx, "documents[1]", func(m map[string]any) {
			m["documents"] = []any{"fine", v}
		})
	}
	// Missing or out-of-range values.
	with("query missing", s4xx, "query", func(m map[string]any) { delete(m, "query") })
	with("query null", s4xx, "query", func(m map[string]any) { m["query"] = nil })
	with("query empty", s4xx, "query", func(m map[string]any) { m["query"] = "" })
	with("documents missing", s4xx, "documents", func(m map[string]any) { delete(m, "documents") })
	with("documents empty", s4xx, "documents", func(m map[string]any) { m["documents"] = []any{} })
	with("top_n negative", s4xx, "top_n", func(m map[string]any) { m["top_n"] = -1 })
	with("max_tokens_per_doc zero", s4xx, "max_tokens_per_doc", func(m map[string]any) { m["max_tokens_per_doc"] = 0 })
	with("max_tokens_per_doc negative", s4xx, "max_tokens_per_doc", func(m map[string]any) { m["max_tokens_per_doc"] = -7 })
	with("query over the limit", s4xx, "query", func(m map[string]any) { m["query"] = strings.Repeat("q", maxQueryBytes+1) })
	with("instruction over the limit", s4xx, "instruction", func(m map[string]any) { m["instruction"] = strings.Repeat("i", maxQueryBytes+1) })
	with("document over the limit", s4xx, "documents[1]", func(m map[string]any) {
		m["documents"] = []any{"fine", strings.Repeat("d", maxItemBytes+1)}
	})
	with("too many documents", s4xx, "documents", func(m map[string]any) {
		docs := make([]any, maxItems+1)
		for i := range docs {
			docs[i] = "d"
		}
		m["documents"] = docs
	})
	with("unknown model", s404, "model", func(m map[string]any) { m["model"] = "no-such-model" })
	// Invalid UTF-8 in every string field (json.Marshal would replace it: spliced in raw).
	utf8Body := func(name, field, pre, post string) {
		raw("invalid UTF-8 in "+name, s4xx, field, pre+badUTF8+post)
	}
	model := ""
	if route == "/v2/rerank" {
		model = `"model":"rerank",`
	}
	utf8Body("query", "query", `{`+model+`"query":"`, `","documents":["a","b"]}`)
	utf8Body("instruction", "instruction", `{`+model+`"query":"q","instruction":"`, `","documents":["a","b"]}`)
	utf8Body("model", "model", `{"query":"q","documents":["a","b"],"model":"`, `"}`)
	utf8Body("documents[1]", "documents[1]", `{`+model+`"query":"q","documents":["a","`, `"]}`)
	utf8Body("documents[1].text", "documents[1]", `{`+model+`"query":"q","documents":["a",{"text":"`, `"}]}`)
	utf8Body("an unknown field", "extra", `{`+model+`"query":"q","documents":["a"],"extra":"`, `"}`)
	// Not JSON, or not the JSON expected.
	for i, b := range []string{"", "{", `{"query":`, "not json", `{"query":"q","documents":["a"],}`,
		`{"query":"q","documents":["a"]} trailing`, "\x00\x01\x02", strings.Repeat("[", 100000), `"just a string"`, "42", "[]", "{\"query\":\"q\",\"documents\":[\"a\"]"} {
		raw(fmt.Sprintf("bad JSON #%d %q", i, truncate(b, 24)), s400, "", b)
	}
	// Over the body limit.
	big := make([]byte, maxBodyBytes+(1<<20))
	copy(big, `{"query":"q","documents":["`)
	for i := 27; i < len(big)-3; i++ {
		big[i] = 'x'
	}
	copy(big[len(big)-3:], `"]}`)
	out = append(out, mcase{name: "body over max_body_bytes", route: route, body: big, status: s413, early: true})
	return out
}

// scoreCases are the malformed bodies of /v1/score (the proto3 JSON mapping of ScoreRequest).
func scoreCases() []mcase {
	const route = "/v1/score"
	var out []mcase
	raw := func(name string, status []int, field, body string) {
		out = append(out, mcase{name: name, route: route, body: []byte(body), status: status, field: field})
	}
	items := `"items":[{"id":"a","text":"doc a"},{"id":"b","text":"doc b"}]`
	for _, c := range []struct{ name, field, body string }{
		{"query is a number", "query", `{"query":1,` + items + `}`},
		{"query is an object", "query", `{"query":{},` + items + `}`},
		{"items is a string", "items", `{"query":"q","items":"doc"}`},
		{"items[1] is a number", "items", `{"query":"q","items":[{"text":"a"},1]}`},
		{"items[1].text is a number", "text", `{"query":"q","items":[{"text":"a"},{"text":1}]}`},
		{"items[0].id is a list", "id", `{"query":"q","items":[{"id":[],"text":"a"}]}`},
		{"top_n is negative", "top_n", `{"query":"q",` + items + `,"top_n":-1}`},
		{"top_n is fractional", "top_n", `{"query":"q",` + items + `,"top_n":1.5}`},
		{"top_n is a bool", "top_n", `{"query":"q",` + items + `,"top_n":true}`},
		{"timeout_ms is negative", "timeout_ms", `{"query":"q",` + items + `,"timeout_ms":-5}`},
		{"options is a string", "options", `{"query":"q",` + items + `,"options":"fast"}`},
		{"unknown truncation name", "options.truncation", `{"query":"q",` + items + `,"options":{"truncation":"TRUNCATION_BOGUS"}}`},
		{"unknown truncation number", "options.truncation", `{"query":"q",` + items + `,"options":{"truncation":9}}`},
		{"truncation is a bool", "truncation", `{"query":"q",` + items + `,"options":{"truncation":true}}`},
		{"max_tokens_per_item is a string", "max_tokens_per_item", `{"query":"q",` + items + `,"options":{"max_tokens_per_item":"lots"}}`},
		{"query empty", "query", `{"query":"",` + items + `}`},
		{"items empty", "items", `{"query":"q","items":[]}`},
		{"item text over the limit", "items[1].text", `{"query":"q","items":[{"text":"a"},{"text":"` + strings.Repeat("d", maxItemBytes+1) + `"}]}`},
	} {
		raw(c.name, s4xx, c.field, c.body)
	}
	for _, c := range []struct{ field, pre, post string }{
		{"request_id", `{"request_id":"`, `","query":"q",` + items + `}`},
		{"query", `{"query":"`, `",` + items + `}`},
		{"instruction", `{"query":"q","instruction":"`, `",` + items + `}`},
		{"items[0].id", `{"query":"q","items":[{"id":"`, `","text":"a"}]}`},
		{"items[1].text", `{"query":"q","items":[{"text":"a"},{"text":"`, `"}]}`},
		{"model", `{"query":"q",` + items + `,"model":"`, `"}`},
	} {
		raw("invalid UTF-8 in "+c.field, s4xx, c.field, c.pre+badUTF8+c.post)
	}
	raw("unknown model", s404, "model", `{"query":"q",`+items+`,"model":"no-such-model"}`)
	for i, b := range []string{"", "{", "nope", `{"query":"q",` + items + `}}`, "[1,2]"} {
		raw(fmt.Sprintf("bad JSON #%d %q", i, b), s400, "", b)
	}
	return out
}

// Protobuf wire helpers.
func pbString(b []byte, num protowire.Number, s string) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func pbMsg(b []byte, num protowire.Number, m []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, m)
}

func pbVarint(b []byte, num protowire.Number, v uint64) []byte {
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func pbItem(id, text string) []byte {
	var m []byte
	if id != "" {
		m = pbString(m, 1, id)
	}
	return pbString(m, 2, text)
}

// Field numbers of ScoreRequest (Ranker.Score) and ScoreBatchRequest (Scorer.ScoreBatch).
const (
	srRequestID, srQuery, srInstruction, srItems, srTopN, srOptions, srModel = 1, 2, 3, 4, 5, 6, 7
	sbQuery, sbInstruction, sbItems                                          = 3, 4, 5
)

// grpcCases are malformed ScoreRequest messages for the proxy's Ranker.Score and a few
// ScoreBatchRequests for a scorer node, as raw bytes (the generated code refuses to encode them).
func grpcCases() []mcase {
	var out []mcase
	add := func(name, field string, code codes.Code, b []byte) {
		out = append(out, mcase{name: name, route: methodR, grpc: true, body: b, code: code, field: field})
	}
	valid := func(edit func(b []byte) []byte) []byte {
		b := pbString(nil, srQuery, "wireless earbuds")
		b = pbMsg(b, srItems, pbItem("a", "Acme earbuds"))
		b = pbMsg(b, srItems, pbItem("b", "Steel water bottle"))
		return edit(b)
	}
	ia := codes.InvalidArgument
	// Invalid UTF-8 in every string field.
	add("invalid UTF-8 in request_id", "request_id", ia, valid(func(b []byte) []byte { return pbString(b, srRequestID, badUTF8) }))
	add("invalid UTF-8 in query", "query", ia, valid(func(b []byte) []byte { return pbString(b, srQuery, badUTF8) }))
	add("invalid UTF-8 in instruction", "instruction", ia, valid(func(b []byte) []byte { return pbString(b, srInstruction, badUTF8) }))
	add("invalid UTF-8 in items[2].id", "items[2].id", ia, valid(func(b []byte) []byte { return pbMsg(b, srItems, pbItem(badUTF8, "c")) }))
	add("invalid UTF-8 in items[2].text", "items[2].text", ia, valid(func(b []byte) []byte { return pbMsg(b, srItems, pbItem("c", badUTF8)) }))
	add("invalid UTF-8 in model", "model", ia, valid(func(b []byte) []byte { return pbString(b, srModel, badUTF8) }))
	// Malformed wire data.
	// protobuf parsers keep a field with the wrong wire type as an unknown field: the request then
	// lacks it, and the error names it as missing.
	add("query only with the varint wire type", "query", ia, func() []byte {
		b := pbVarint(nil, srQuery, 5)
		return pbMsg(b, srItems, pbItem("a", "Acme earbuds"))
	}())
	add("items only with the fixed32 wire type", "items", ia, func() []byte {
		b := pbString(nil, srQuery, "q")
		b = protowire.AppendTag(b, srItems, protowire.Fixed32Type)
		return protowire.AppendFixed32(b, 7)
	}())
	add("items[2] holds garbage", "items[2]", ia, valid(func(b []byte) []byte { return pbMsg(b, srItems, []byte{0xff, 0xff, 0xff}) }))
	add("query length past the end", "", ia, valid(func(b []byte) []byte {
		b = protowire.AppendTag(b, srQuery, protowire.BytesType)
		return append(protowire.AppendVarint(b, 1000), "short"...)
	}))
	add("truncated message", "", ia, valid(func(b []byte) []byte { return b[:len(b)-3] }))
	add("field number 0", "", ia, valid(func(b []byte) []byte { return append(b, 0x00, 0x01) }))
	add("overlong varint", "", ia, valid(func(b []byte) []byte {
		return append(protowire.AppendTag(b, srTopN, protowire.VarintType), bytes.Repeat([]byte{0xff}, 11)...)
	}))
	add("unmatched end group", "", ia, valid(func(b []byte) []byte { return protowire.AppendTag(b, 9, protowire.EndGroupType) }))
	rng := rand.New(rand.NewPCG(7, 7))
	for i := range 4 {
		g := make([]byte, 16+rng.IntN(64))
		for j := range g {
			g[j] = byte(rng.UintN(256))
		}
		g[0] = 0x12 // query, bytes: so the first tag is valid and the rest is garbage
		g[1] = 0x7f
		add(fmt.Sprintf("random garbage #%d", i), "", ia, g)
	}
	// Well-formed wire data, bad values.
	add("query empty", "query", ia, valid(func(b []byte) []byte { return pbString(b, srQuery, "") }))
	add("no items", "items", ia, pbString(nil, srQuery, "q"))
	add("unknown truncation enum", "options.truncation", ia, valid(func(b []byte) []byte { return pbMsg(b, srOptions, pbVarint(nil, 1, 99)) }))
	add("query over the limit", "query", ia, valid(func(b []byte) []byte { return pbString(b, srQuery, strings.Repeat("q", maxQueryBytes+1)) }))
	add("item over the limit", "items[2].text", ia, valid(func(b []byte) []byte { return pbMsg(b, srItems, pbItem("", strings.Repeat("d", maxItemBytes+1))) }))
	add("too many items", "items", ia, valid(func(b []byte) []byte {
		for range maxItems {
			b = pbMsg(b, srItems, pbItem("", "d"))
		}
		return b
	}))
	add("unknown model", "model", codes.NotFound, valid(func(b []byte) []byte { return pbString(b, srModel, "no-such-model") }))

	// Straight to a scorer node.
	node := func(name, field string, b []byte) {
		out = append(out, mcase{name: name, route: methodS, grpc: true, toNode: true, body: b, code: ia, field: field})
	}
	nb := func(edit func(b []byte) []byte) []byte {
		b := pbString(nil, sbQuery, "wireless earbuds")
		b = pbMsg(b, sbItems, pbItem("a", "Acme earbuds"))
		return edit(b)
	}
	node("invalid UTF-8 in query", "query", nb(func(b []byte) []byte { return pbString(b, sbQuery, badUTF8) }))
	node("invalid UTF-8 in instruction", "instruction", nb(func(b []byte) []byte { return pbString(b, sbInstruction, badUTF8) }))
	node("invalid UTF-8 in items[1].text", "items[1].text", nb(func(b []byte) []byte { return pbMsg(b, sbItems, pbItem("", badUTF8)) }))
	node("query only with the varint wire type", "query", pbMsg(pbVarint(nil, sbQuery, 1), sbItems, pbItem("", "doc")))
	node("truncated message", "", nb(func(b []byte) []byte { return b[:len(b)-2] }))
	node("empty query", "query", pbMsg(nil, sbItems, pbItem("", "doc")))
	return out
}

// malformedCases is every case, HTTP then gRPC.
func malformedCases() []mcase {
	var out []mcase
	for _, r := range []string{"/v1/rerank", "/rerank", "/v2/rerank"} {
		out = append(out, rerankCases(r)...)
	}
	out = append(out, scoreCases()...)
	return append(out, grpcCases()...)
}

// rawCodec sends bytes as they are and decodes replies as protobuf.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return v.([]byte), nil }
func (rawCodec) Unmarshal(b []byte, v any) error {
	return proto.Unmarshal(b, v.(proto.Message))
}
func (rawCodec) Name() string { return "proto" }

// sendHTTP posts c.body to the proxy and reads the error's message.
func (e *env) sendHTTP(ctx context.Context, c mcase) mresult {
	r := mresult{c: c}
	var b []byte
	if c.early {
		r.status, b, r.err = postEarly(ctx, e.pcfg.HTTPAddr, c.route, c.body)
		if r.err != nil {
			return r
		}
	} else {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.proxyURL(c.route), bytes.NewReader(c.body))
		if err != nil {
			r.err = err
			return r
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := e.client.Do(req)
		if err != nil {
			r.err = err
			return r
		}
		b, _ = io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		r.status = resp.StatusCode
	}
	var generic struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
		Message string `json:"message"`
	}
	if json.Unmarshal(b, &generic) == nil {
		r.message = generic.Error.Message
		if r.message == "" {
			r.message = generic.Message
		}
	}
	if r.message == "" && r.status >= 400 {
		r.message = "" // a non-JSON error body names nothing; it fails the case
		r.err = fmt.Errorf("error body is not JSON with a message: %s", truncate(string(b), 120))
	}
	return r
}

// postEarly posts body over a fresh connection while reading: a reply that arrives before the
// body is written (a server refusing an oversize body without reading it) is still seen, as curl
// sees it. net/http reports the write's "connection reset" instead when the server closes
// without draining what was sent.
func postEarly(ctx context.Context, addr, path string, body []byte) (int, []byte, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return 0, nil, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	go func() {
		fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n", path, addr, len(body))
		for rest := body; len(rest) > 0; {
			n, err := conn.Write(rest[:min(len(rest), 64<<10)])
			if err != nil {
				return // the server has answered and closed: the reader has its reply
			}
			rest = rest[n:]
		}
	}()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, nil, fmt.Errorf("no reply before the connection ended: %w", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, b, nil
}

// sendGRPC invokes c.route with c.body on conn.
func sendGRPC(ctx context.Context, conn *grpc.ClientConn, c mcase) mresult {
	r := mresult{c: c}
	var out proto.Message = &relevancev1.ScoreResponse{}
	if c.toNode {
		out = &relevancev1.ScoreBatchResponse{}
	}
	err := conn.Invoke(ctx, c.route, c.body, out, grpc.ForceCodec(rawCodec{}))
	st := status.Convert(err)
	r.code, r.message = st.Code(), st.Message()
	if err == nil {
		r.message = "(answered OK)"
	}
	return r
}

func runMalformed(ctx context.Context, e *env, r *Result) error {
	before := e.c.Nodes()
	proxyBefore := e.proxyProc()
	cases := malformedCases()
	pconn, err := grpc.NewClient(e.pcfg.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer pconn.Close()
	nconn, err := grpc.NewClient(before[0].GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer nconn.Close()
	// One valid request first: a proxy that has just started learns the served model's names from
	// its nodes' first replies, and only then can it refuse an unknown one.
	if ok, err := e.serves(ctx); !ok {
		return fmt.Errorf("the cluster does not serve a valid request before the malformed ones: %v", err)
	}
	var bad []mresult
	counts := map[string]int64{}
	for _, c := range cases {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		var res mresult
		switch {
		case !c.grpc:
			res = e.sendHTTP(cctx, c)
			counts["http"]++
		case c.toNode:
			res = sendGRPC(cctx, nconn, c)
			counts["grpc_node"]++
		default:
			res = sendGRPC(cctx, pconn, c)
			counts["grpc"]++
		}
		cancel()
		if !res.ok() {
			bad = append(bad, res)
		}
	}
	crashed := crashedProcs(before, e.c.Nodes(), proxyBefore, e.proxyProc())
	// The cluster still serves a valid request.
	serves := 0.0
	if ok, _ := e.serves(ctx); ok {
		serves = 1
	}
	r.add("cases", float64(len(cases)), "")
	r.add("http_cases", float64(counts["http"]), "")
	r.add("grpc_cases", float64(counts["grpc"]+counts["grpc_node"]), "")
	r.add("unexpected", float64(len(bad)), "")
	r.add("crashed", float64(len(crashed)), "")
	r.add("still_serves", serves, "")
	r.require("unexpected", "==", 0)
	r.require("crashed", "==", 0)
	r.require("still_serves", "==", 1)
	for _, p := range crashed {
		r.Details = append(r.Details, "crashed: "+p)
	}
	for _, m := range bad {
		r.Details = append(r.Details, "unexpected: "+m.String())
	}
	return nil
}

// crashedProcs names the children that exited or were restarted between two snapshots.
func crashedProcs(before, after []cluster.Node, proxyBefore, proxyAfter *cluster.Proc) []string {
	var out []string
	for i, nd := range after {
		if i < len(before) && (nd.Proc != before[i].Proc || nd.Restarts != before[i].Restarts) {
			out = append(out, fmt.Sprintf("%s restarted (%s)", nd.Name, truncate(before[i].Describe(), 300)))
		} else if isDone(nd.Proc) {
			out = append(out, fmt.Sprintf("%s exited (%s)", nd.Name, truncate(nd.Describe(), 300)))
		}
	}
	if proxyAfter != proxyBefore || isDone(proxyAfter) {
		out = append(out, fmt.Sprintf("proxy exited (%s)", truncate(proxyBefore.Describe(), 300)))
	}
	return out
}

// serves sends the example request and reports whether it was answered 200.
func (e *env) serves(ctx context.Context) (bool, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodPost, e.proxyURL("/v1/rerank"), strings.NewReader(cluster.ExampleRerankBody))
	if err != nil {
		return false, err
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode == http.StatusOK, nil
}
