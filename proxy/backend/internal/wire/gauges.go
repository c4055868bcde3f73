package wire

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/relevance-scoring/relevance/proxy/backend"
)

// Gauges reads a Prometheus text exposition and returns, for each name, the sum over its series
// (servers label them by model or engine). ok is false when the text does not parse or a name is
// absent, as when the server runs without metrics.
func Gauges(body []byte, names ...string) ([]float64, bool) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil, false
	}
	out := make([]float64, len(names))
	for i, name := range names {
		mf, ok := fams[name]
		if !ok {
			return nil, false
		}
		for _, m := range mf.GetMetric() {
			switch {
			case m.Gauge != nil:
				out[i] += m.GetGauge().GetValue()
			case m.Untyped != nil:
				out[i] += m.GetUntyped().GetValue()
			case m.Counter != nil:
				out[i] += m.GetCounter().GetValue()
			}
		}
	}
	return out, true
}

// LoadGauge reads the waiting and running gauges from the node's Prometheus endpoint at path.
func (c *Client) LoadGauge(ctx context.Context, path, waiting, running string) (float64, float64, bool) {
	body, ok := c.GetOK(ctx, path)
	if !ok {
		return 0, 0, false
	}
	v, ok := Gauges(body, waiting, running)
	if !ok {
		return 0, 0, false
	}
	return v[0], v[1], true
}

// Healthy reports whether GET path answers 200.
func (c *Client) Healthy(ctx context.Context, path string) bool {
	_, ok := c.GetOK(ctx, path)
	return ok
}

// CheckModel is backend.ModelChecker.CheckModel for a server that says at path what it serves:
// served reads the names from the reply (ok false: a reply it does not understand). A list of
// names without model is a *backend.ModelError; no reply, a 5xx or a 429 is
// backend.ErrModelUnchecked (ask again); no model configured, another status (a 404: a server
// or gateway without the endpoint) or a reply not understood is nil, so that a server that
// cannot be checked still joins.
func (c *Client) CheckModel(ctx context.Context, model, path string, served func(body []byte) (names []string, ok bool)) error {
	if model == "" {
		return nil
	}
	code, body, err := c.Get(ctx, path)
	switch {
	case err != nil || code >= 500 || code == http.StatusTooManyRequests:
		return fmt.Errorf("node %s: GET %s: %w", c.node, path, backend.ErrModelUnchecked)
	case code != http.StatusOK:
		return nil
	}
	names, ok := served(body)
	if !ok || len(names) == 0 || slices.Contains(names, model) {
		return nil
	}
	return &backend.ModelError{Node: c.node, Model: model, Served: names}
}

// ModelIDs reads the ids of an OpenAI-style model list, {"data": [{"id": …}, …]} (vLLM's
// /v1/models, Infinity's /models).
func ModelIDs(body []byte) ([]string, bool) {
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if json.Unmarshal(body, &list) != nil || list.Data == nil {
		return nil, false
	}
	ids := make([]string, 0, len(list.Data))
	for _, m := range list.Data {
		if m.ID != "" {
			ids = append(ids, m.ID)
		}
	}
	return ids, true
}
