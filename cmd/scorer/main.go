// Command scorer is the scorer node and its offline tools. See `scorer --help`.
package main

import (
	"os"

	"github.com/relevance-scoring/relevance/internal/cli"
)

func main() {
	os.Exit(cli.Dispatch("scorer", "the scorer node: scores (query, item) pairs with an LLM cross-encoder", os.Args[1:], []cli.Command{
		{Name: "serve", Summary: "run a scorer node (gRPC Scorer.ScoreBatch + HTTP health/metrics)", Run: runServe},
		{Name: "score", Summary: "score documents against a query offline, one JSON line per document", Run: runScore},
		{Name: "tokenize", Summary: "tokenize JSON strings from stdin, one JSON id array per line", Run: runTokenize},
		{Name: "gen-model", Summary: "write a deterministic random-initialised Hugging Face checkpoint", Run: runGenModel},
	}))
}
