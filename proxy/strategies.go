package proxy

import (
	"math/rand/v2"

	"github.com/relevance-scoring/relevance/proxy/route"
	"github.com/relevance-scoring/relevance/proxy/route/leastloaded"
	"github.com/relevance-scoring/relevance/proxy/route/random"
	"github.com/relevance-scoring/relevance/proxy/route/roundrobin"
	"github.com/relevance-scoring/relevance/proxy/split"
	"github.com/relevance-scoring/relevance/proxy/split/cost"
	"github.com/relevance-scoring/relevance/proxy/split/fixed"
)

// The one registration list of strategies, by configuration name (no init side effects).

var splitters = map[string]func(Config) split.Splitter{
	fixed.Type: func(Config) split.Splitter { return fixed.New() },
	cost.Type:  func(Config) split.Splitter { return cost.New() },
}

var pickers = map[string]func(Config, route.Rand) route.Picker{
	random.Type:      func(_ Config, r route.Rand) route.Picker { return random.New(r) },
	roundrobin.Type:  func(Config, route.Rand) route.Picker { return roundrobin.New(rand.Uint64()) },
	leastloaded.Type: func(c Config, r route.Rand) route.Picker { return leastloaded.New(c.Route.FullScanMax, r) },
}
