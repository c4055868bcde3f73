// Command proxy is the front of the relevance scoring system. See `proxy --help`.
package main

import (
	"os"

	"github.com/relevance-scoring/relevance/internal/cli"
)

func main() {
	os.Exit(cli.Dispatch("proxy", "splits scoring requests across scorer nodes and merges the answers", os.Args[1:], []cli.Command{
		{Name: "serve", Summary: "serve gRPC Ranker.Score and the HTTP rerank APIs", Run: runServe},
	}))
}
