package proxy

import (
	"maps"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/relevance-scoring/relevance/proxy/route"
	"github.com/relevance-scoring/relevance/proxy/route/leastloaded"
	"github.com/relevance-scoring/relevance/proxy/route/prefixaffinity"
	"github.com/relevance-scoring/relevance/proxy/route/random"
	"github.com/relevance-scoring/relevance/proxy/route/roundrobin"
	"github.com/relevance-scoring/relevance/proxy/split"
	"github.com/relevance-scoring/relevance/proxy/split/cost"
	"github.com/relevance-scoring/relevance/proxy/split/fixed"
)

// The one registration list of strategies, by configuration name (no init side effects). A
// strategy added here is accepted by Config.Validate, named in its error and in the flag help
// of `proxy serve` (SplitStrategies, RouteStrategies), and built by New.

var splitters = map[string]func(Config) split.Splitter{
	fixed.Type: func(Config) split.Splitter { return fixed.New() },
	cost.Type:  func(Config) split.Splitter { return cost.New() },
}

var pickers = map[string]func(Config, route.Rand) route.Picker{
	random.Type:         func(_ Config, r route.Rand) route.Picker { return random.New(r) },
	roundrobin.Type:     func(Config, route.Rand) route.Picker { return roundrobin.New(rand.Uint64()) },
	leastloaded.Type:    func(c Config, r route.Rand) route.Picker { return leastloaded.New(c.Route.FullScanMax, r) },
	prefixaffinity.Type: func(c Config, r route.Rand) route.Picker { return prefixaffinity.New(c.Route.FullScanMax, r) },
}

// SplitStrategies returns the names of the registered splitting strategies (split.strategy),
// sorted.
func SplitStrategies() []string { return slices.Sorted(maps.Keys(splitters)) }

// RouteStrategies returns the names of the registered routing strategies (route.strategy),
// sorted.
func RouteStrategies() []string { return slices.Sorted(maps.Keys(pickers)) }

// mustBeOneOf is Validate's complaint about a name not in names.
func mustBeOneOf(names []string) string { return "must be one of " + strings.Join(names, ", ") }
