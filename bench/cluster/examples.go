package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// ExampleRerankBody is the body of the printed /v1/rerank example.
const ExampleRerankBody = `{"query":"wireless noise cancelling earbuds","documents":["Acme wireless earbuds, noise-cancelling, 30 h battery, USB-C","Stainless steel water bottle, 1 L, keeps drinks cold for 24 h","Kestrel over-ear headphones with active noise cancelling","无线蓝牙耳机 降噪 长续航"],"top_n":3,"return_documents":true}`

// SelfTestBody is the self-test's /v1/rerank body: the example's shape (four documents, one of
// them Chinese, top_n, return_documents) on a query and documents of its own. Were it the example
// itself, the proxy's score cache would answer the user's first copy-paste from the self-test's
// scores, with usage.prompt_tokens 0 and every item cached, instead of showing a real pass.
const SelfTestBody = `{"query":"cast iron skillet","documents":["Pre-seasoned cast iron skillet, 26 cm, oven safe","Wireless mechanical keyboard with hot-swappable switches","Enamelled cast iron casserole, 4 L","铸铁平底锅 不粘 26厘米"],"top_n":3,"return_documents":true}`

// Examples returns copy-paste commands for a proxy at httpAddr and grpcAddr whose default
// budget is slo (0: the proxy's default, which bench load's own --slo default matches), in front
// of emulated nodes or not.
func Examples(httpAddr, grpcAddr string, slo time.Duration, emulated bool) string {
	load := ""
	if slo > 0 {
		load = " --slo " + slo.String()
	}
	if emulated {
		load += " --emulated" // its figures are labelled EMULATED
	}
	return fmt.Sprintf(`Try it:

  curl -s http://%[1]s/v1/rerank -H 'Content-Type: application/json' \
    -d '%[3]s'

  curl -s http://%[1]s/v2/rerank -H 'Content-Type: application/json' \
    -d '{"model":"rerank","query":"trail running shoes","documents":["Lightweight trail running shoes with grippy soles","Leather office chair","Waterproof hiking boots"],"top_n":2}'

  grpcurl -plaintext -d '{"query":"trail running shoes","items":[{"text":"Lightweight trail running shoes"},{"text":"Leather office chair"}]}' \
    %[2]s relevance.v1.Ranker/Score

  bin/bench load --target http://%[1]s --duration 30s%[4]s
  curl -s http://%[1]s/v1/nodes
`, httpAddr, grpcAddr, ExampleRerankBody, load)
}

// SelfTest sends SelfTestBody to /v1/rerank and returns the reply's results, so the printed
// examples' route, proxy and nodes are known to work before they are shown (and the nodes have
// computed the prompt template once, so the user's first request is timed as a warm node's).
func SelfTest(ctx context.Context, httpAddr string, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+httpAddr+"/v1/rerank", strings.NewReader(SelfTestBody))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	client := &http.Client{Transport: &http.Transport{Proxy: nil}}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("self-test /v1/rerank: %w", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("self-test /v1/rerank: HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(b))
	}
	var rep struct {
		Results []struct {
			Index int     `json:"index"`
			Score float64 `json:"relevance_score"`
		} `json:"results"`
	}
	if err := json.Unmarshal(b, &rep); err != nil || len(rep.Results) == 0 {
		return "", fmt.Errorf("self-test /v1/rerank: unexpected reply: %s", bytes.TrimSpace(b))
	}
	var out bytes.Buffer
	for _, r := range rep.Results {
		fmt.Fprintf(&out, "#%d %.4f  ", r.Index, r.Score)
	}
	return out.String(), nil
}
