package wire

import (
	"bytes"
	"context"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
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
