package httpapi

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/relevance-scoring/relevance/proxy/front"
)

// TestTopLevelScansAgreeWithTheDecoder: on valid JSON objects of every shape — keys spelled with
// escapes, strings holding quotes, brackets and commas, nested values holding the same keys —
// hasKey and topLevelArrayLen see exactly the members and array lengths encoding/json decodes.
// (An escaped "items" key was not counted, so such a body skipped the item limit's check on its
// bytes and was decoded whole.)
func TestTopLevelScansAgreeWithTheDecoder(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	keys := []struct{ raw, name string }{
		{`"items"`, "items"}, {`"\u0069tems"`, "items"}, {`"texts"`, "texts"}, {`"t\u0065xts"`, "texts"},
		{`"documents"`, "documents"}, {`"query"`, "query"}, {`"meta"`, "meta"}, {`"\"items\""`, `"items"`},
	}
	for n := range 3000 {
		var sb strings.Builder
		sb.WriteString(ws(rng) + "{")
		used := map[string]bool{}
		first := true
		for range rng.IntN(5) {
			k := keys[rng.IntN(len(keys))]
			if used[k.name] {
				continue
			}
			used[k.name] = true
			if !first {
				sb.WriteString(ws(rng) + ",")
			}
			first = false
			sb.WriteString(ws(rng) + k.raw + ws(rng) + ":" + ws(rng) + randValue(rng, 0) + ws(rng))
		}
		sb.WriteString("}" + ws(rng))
		body := []byte(sb.String())
		// Every prefix of it is a body cut short: the scans must read it without panicking
		// (one cut after a comma in the counted array indexed past the end).
		for cut := range len(body) {
			_ = hasKey(body[:cut], "items")
			_ = topLevelArrayLen(body[:cut], "items", 1000)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(body, &m); err != nil {
			t.Fatalf("generated invalid JSON %s: %v", body, err)
		}
		for _, name := range []string{"items", "texts", "documents", "query", "meta", `"items"`, "absent"} {
			raw, ok := m[name]
			if got := hasKey(body, name); got != ok {
				t.Fatalf("case %d: hasKey(%s, %q) = %v, want %v", n, body, name, got, ok)
			}
			want := 0
			var arr []json.RawMessage
			if ok && json.Unmarshal(raw, &arr) == nil {
				want = len(arr)
			}
			if got := topLevelArrayLen(body, name, 1000); got != want {
				t.Fatalf("case %d: topLevelArrayLen(%s, %q) = %d, want %d", n, body, name, got, want)
			}
			if want > 1 {
				if got := topLevelArrayLen(body, name, 2); got != 2 {
					t.Fatalf("case %d: topLevelArrayLen(%s, %q, stop 2) = %d, want 2", n, body, name, got)
				}
			}
		}
	}
}

// ws is a random run of JSON whitespace, often empty.
func ws(rng *rand.Rand) string {
	return strings.Repeat([]string{"", " ", "\n", "\t ", "\r\n"}[rng.IntN(5)], rng.IntN(2))
}

// randValue is a random valid JSON value whose strings hold the scanners' delimiters.
func randValue(rng *rand.Rand, depth int) string {
	k := rng.IntN(9)
	if depth > 2 {
		k = rng.IntN(5)
	}
	switch k {
	case 0:
		return fmt.Sprint(rng.IntN(1000) - 500)
	case 1:
		return []string{"true", "false", "null", "1.5e3", "-0.25"}[rng.IntN(5)]
	case 2, 3, 4:
		parts := []string{`a`, `\"`, `\\`, `,`, `]`, `[`, `{`, `}`, `:`, `items`, `\"items\":[`, `\u0041`, ` `}
		var sb strings.Builder
		sb.WriteByte('"')
		for range rng.IntN(6) {
			sb.WriteString(parts[rng.IntN(len(parts))])
		}
		sb.WriteByte('"')
		return sb.String()
	case 5, 6:
		var el []string
		for range rng.IntN(5) {
			el = append(el, ws(rng)+randValue(rng, depth+1)+ws(rng))
		}
		return "[" + strings.Join(el, ",") + ws(rng) + "]"
	default:
		var el []string
		for i := range rng.IntN(4) {
			key := []string{`"items"`, `"texts"`, `"x"`, `"\u0069tems"`}[i]
			el = append(el, ws(rng)+key+ws(rng)+":"+ws(rng)+randValue(rng, depth+1))
		}
		return "{" + strings.Join(el, ",") + ws(rng) + "}"
	}
}

// FuzzJSONScan: the top-level scans never panic or loop, whatever the bytes.
func FuzzJSONScan(f *testing.F) {
	for _, s := range []string{`{"items":[1,2]}`, `{"a":"\\","items":[{"x":[1]},"]"]}`, `{"`, `{"items":[`, ``, `"`, `{"\`, `{"items":[1,`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		_ = hasKey(body, "items")
		_ = topLevelArrayLen(body, "items", 1000)
		_ = topLevelArrayLen(body, "items", 2)
	})
}

// TestScoreBodyCutShortIs400: the production front has MaxItems > 0 (limits.max_items
// must be > 0), so /v1/score counts items on the raw bytes before decoding; a truncated body must
// be a 400, not a recovered panic answered 500.
func TestScoreBodyCutShortIs400(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := front.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(DefaultConfig(), Options{Core: newFakeCore(), Metrics: m, Gatherer: reg, MaxItems: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var ctx fasthttp.RequestCtx
	ctx.Request.SetRequestURI("/v1/score")
	ctx.Request.Header.SetMethod(fasthttp.MethodPost)
	ctx.Request.Header.SetContentType("application/json")
	ctx.Request.SetBody([]byte(`{"query":"q","items":[{"text":"a"},`))
	s.handle(&ctx)
	if code := ctx.Response.StatusCode(); code != http.StatusBadRequest {
		t.Errorf("truncated /v1/score body: %d %s, want 400", code, ctx.Response.Body())
	}
}

// TestNativeScoreBodyWithAVLLMFieldStaysNative: a /v1/score body with "query" and "items" that
// also carries a field vLLM's score API uses (text_1, queries) is the native request with an
// unknown field, which is ignored, not a vLLM score request to be answered in vLLM's shape.
func TestNativeScoreBodyWithAVLLMFieldStaysNative(t *testing.T) {
	for _, body := range []string{
		`{"query":"q","items":[{"text":"a"}],"queries":["x"]}`,
		`{"query":"q","items":[{"text":"a"}],"text_1":"x"}`,
	} {
		if isVLLMScore([]byte(body)) {
			t.Errorf("/v1/score %s: routed to the vLLM score API; want a native request with an ignored field", body)
		}
	}
	if !isVLLMScore([]byte(`{"model":"m","text_1":"q","text_2":["a","b"]}`)) {
		t.Error("vLLM's own score body is no longer recognised")
	}
}
