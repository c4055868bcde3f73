package wire

import (
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/relevance-scoring/relevance/prompt"
	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
	"github.com/relevance-scoring/relevance/proxy/backend"
)

func TestRanked(t *testing.T) {
	for _, tc := range []struct {
		name     string
		body     string
		arrayKey string
		n        int
		want     []float64
		wantErr  string
	}{
		{name: "bare array, any order", body: `[{"index":2,"score":0.9},{"index":0,"score":0.5},{"index":1,"score":0.1}]`, n: 3, want: []float64{0.5, 0.1, 0.9}},
		{name: "object", body: `{"results":[{"index":1,"score":-2.5},{"index":0,"score":3}]}`, arrayKey: "results", n: 2, want: []float64{3, -2.5}},
		{name: "integral float index", body: `[{"index":1.0,"score":1},{"index":0e0,"score":2}]`, n: 2, want: []float64{2, 1}},
		{name: "extra fields", body: `[{"index":0,"score":1,"document":{"text":"x"}}]`, n: 1, want: []float64{1}},
		{name: "out of range", body: `[{"index":7,"score":1}]`, n: 4, wantErr: "results[0].index 7 out of range for 4 documents"},
		{name: "negative index", body: `[{"index":-1,"score":1}]`, n: 1, wantErr: "results[0].index -1 out of range for 1 documents"},
		{name: "duplicate", body: `[{"index":0,"score":1},{"index":0,"score":2}]`, n: 2, wantErr: "results[1].index 0 repeats results[0].index"},
		{name: "missing index", body: `[{"score":1}]`, n: 1, wantErr: "results[0].index: missing"},
		{name: "string index", body: `[{"index":"0","score":1}]`, n: 1, wantErr: `results[0].index: not an integer: "0"`},
		{name: "fractional index", body: `[{"index":0.5,"score":1}]`, n: 1, wantErr: "results[0].index: not an integer: 0.5"},
		{name: "missing score", body: `[{"index":0}]`, n: 1, wantErr: "results[0].score: missing"},
		{name: "string score", body: `[{"index":0,"score":"high"}]`, n: 1, wantErr: `results[0].score: not a number: "high"`},
		{name: "null score", body: `[{"index":0,"score":null}]`, n: 1, wantErr: "results[0].score: not a number: null"},
		{name: "overflowing score", body: `[{"index":0,"score":1e999}]`, n: 1, wantErr: "results[0].score: not a number: 1e999"},
		{name: "too few", body: `[{"index":1,"score":1}]`, n: 3, wantErr: "results: 1 entries for 3 documents (index 0 missing)"},
		{name: "not an object element", body: `[1]`, n: 1, wantErr: "results[0]: not an object"},
		{name: "not an array", body: `{"error":"x"}`, n: 1, wantErr: "results: not an array"},
		{name: "null", body: `null`, n: 1, wantErr: "results: not an array"},
		{name: "array key missing", body: `{"data":[]}`, arrayKey: "results", n: 1, wantErr: "results: missing"},
		{name: "not JSON", body: `<html>`, arrayKey: "results", n: 1, wantErr: "reply: not a JSON object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Ranked([]byte(tc.body), tc.arrayKey, "index", "score", tc.n)
			if tc.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			vals := make([]float64, len(got))
			for i, e := range got {
				vals[i] = e.Score
			}
			if diff := cmp.Diff(tc.want, vals); diff != "" {
				t.Errorf("scores in item order (-want +got):\n%s", diff)
			}
		})
	}
}

func TestScores(t *testing.T) {
	req := &relevancev1.ScoreBatchRequest{Items: []*relevancev1.Item{{Id: "a"}, {Id: "b"}}}
	got, err := Scores("n", req, []Entry{{Score: 0}, {Score: 2}}, Logit)
	if err != nil {
		t.Fatal(err)
	}
	if got[0].GetScore() != 0.5 || got[0].GetId() != "a" || got[1].GetIndex() != 1 || math.Abs(float64(got[1].GetScore())-1/(1+math.Exp(-2))) > 1e-7 {
		t.Errorf("from logits: %v", got)
	}
	got, err = Scores("n", req, []Entry{{Score: 1}, {Score: 0.25}}, Probability)
	if err != nil {
		t.Fatal(err)
	}
	if got[0].GetScore() != 1 || math.IsInf(float64(got[0].GetLogit()), 0) || math.Abs(float64(got[1].GetLogit())-math.Log(1.0/3)) > 1e-6 {
		t.Errorf("from probabilities: %v", got)
	}
	_, err = Scores("vllm@h:1", req, []Entry{{Score: 0.5}, {Score: 3.2, Path: "results[0].relevance_score"}}, Probability)
	if s := status.Convert(err); s.Code() != codes.Internal || s.Message() != "node vllm@h:1: results[0].relevance_score 3.2 outside [0, 1]: the server is not returning probabilities" {
		t.Errorf("probability 3.2: %v", err)
	}
}

func TestErrorMessage(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`{"error":"batch size 33 > maximum allowed batch size 32","error_type":"Validation"}`, "batch size 33 > maximum allowed batch size 32"},
		{`{"error":{"message":"bad","type":"BadRequestError","param":null,"code":400}}`, "bad"},
		{`{"error":{"code":500,"message":"input (600 tokens) is too large","type":"server_error"}}`, "input (600 tokens) is too large"},
		{`{"object":"error","message":"Query cannot be empty","type":"BadRequest","param":null,"code":400}`, "Query cannot be empty"},
		{`{"detail":"Not Found"}`, "Not Found"},
		{`{"detail":[{"type":"too_long","loc":["body","documents"],"msg":"List should have at most 2048 items"}]}`, "body.documents: List should have at most 2048 items"},
		{`Failed to deserialize the JSON body`, `"Failed to deserialize the JSON body"`},
		{``, `""`},
	} {
		if got := ErrorMessage([]byte(tc.body)); got != tc.want {
			t.Errorf("ErrorMessage(%s) = %q, want %q", tc.body, got, tc.want)
		}
	}
}

func TestCodeForStatus(t *testing.T) {
	for status, want := range map[int]codes.Code{
		400: codes.InvalidArgument, 401: codes.Unauthenticated, 403: codes.PermissionDenied, 404: codes.Unimplemented,
		408: codes.DeadlineExceeded, 413: codes.FailedPrecondition, 422: codes.InvalidArgument, 424: codes.Unavailable,
		429: codes.ResourceExhausted, 500: codes.Unavailable, 501: codes.Unimplemented, 502: codes.Unavailable,
		503: codes.Unavailable, 504: codes.DeadlineExceeded,
	} {
		if got := CodeForStatus(status); got != want {
			t.Errorf("CodeForStatus(%d) = %v, want %v", status, got, want)
		}
	}
}

func TestGauges(t *testing.T) {
	text := `# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 3.0
vllm:num_requests_waiting{engine="1",model_name="m"} 1.0
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 5.0
te_queue_size 7
`
	got, ok := Gauges([]byte(text), "vllm:num_requests_waiting", "vllm:num_requests_running", "te_queue_size")
	if !ok || !cmp.Equal(got, []float64{4, 5, 7}) {
		t.Errorf("Gauges = %v, %v; want [4 5 7] true", got, ok)
	}
	if _, ok := Gauges([]byte(text), "sglang:num_queue_reqs"); ok {
		t.Error("absent gauge: ok = true")
	}
	if _, ok := Gauges([]byte("<html>"), "x"); ok {
		t.Error("not an exposition: ok = true")
	}
}

func TestPair(t *testing.T) {
	req := &relevancev1.ScoreBatchRequest{Query: "usb-c charger", Items: []*relevancev1.Item{{Text: "65 W GaN charger"}}}
	q, docs, err := Pair("n", backend.TemplateProxy, FixedInstruction, req)
	if err != nil {
		t.Fatal(err)
	}
	full := prompt.HeadText + prompt.BodyPrefix("", "usb-c charger") + " 65 W GaN charger" + prompt.TailText
	if q+docs[0] != full || !strings.HasSuffix(q, "<Document>:") {
		t.Errorf("proxy pair %q + %q is not the full prompt split after <Document>:", q, docs[0])
	}
	q, docs, err = Pair("n", backend.TemplateServer, FixedInstruction, req)
	if err != nil || q != "usb-c charger" || docs[0] != "65 W GaN charger" {
		t.Errorf("server pair = %q, %q, %v", q, docs, err)
	}
	req.Instruction = prompt.DefaultInstruction
	if _, _, err := Pair("n", backend.TemplateServer, FixedInstruction, req); err != nil {
		t.Errorf("the default instruction, spelled out: %v", err)
	}
	req.Instruction = "custom"
	if _, _, err := Pair("n", backend.TemplateServer, FixedInstruction, req); status.Code(err) != codes.InvalidArgument {
		t.Errorf("custom instruction, fixed template: %v", err)
	}
	if _, _, err := Pair("n", backend.TemplateServer, SentInstruction, req); err != nil {
		t.Errorf("custom instruction, sent: %v", err)
	}
}
