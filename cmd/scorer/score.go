package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"

	"github.com/relevance-scoring/relevance/internal/cli"
	"github.com/relevance-scoring/relevance/scorer"
	"github.com/relevance-scoring/relevance/scorer/model"
)

// scoreBatch is how many documents run in one forward pass; the query's prefix KV is cached
// between passes, so batching bounds memory without recomputing the prefix.
const scoreBatch = 64

// runScore scores documents offline (contract: score --model DIR --query Q --documents FILE
// [--instruction I] [--max-tokens N] [--threads N]); one JSON line per document, in input order.
func runScore(args []string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	return scoreMain(ctx, args, os.Stdin, os.Stdout)
}

func scoreMain(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	fs := cli.NewFlagSet("scorer", "score", "--model DIR --query Q --documents FILE [--instruction I] [--max-tokens N] [--threads N]")
	dir := fs.String("model", "", "Hugging Face checkpoint folder (config.json, *.safetensors, tokenizer.json)")
	query := fs.String("query", "", "the query")
	docsPath := fs.String("documents", "", "file with one JSON string or {\"text\": …} per line (- for stdin)")
	instruction := fs.String("instruction", "", "task instruction (default: the web-search instruction)")
	maxTokens := fs.Int("max-tokens", 0, "longest prompt in tokens; longer documents are cut (0: the model's limit)")
	threads := fs.Int("threads", 0, "kernel threads (0: all cores)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	switch {
	case *dir == "":
		return errors.New("--model: required")
	case *query == "":
		return errors.New("--query: required")
	case *docsPath == "":
		return errors.New("--documents: required")
	case *threads < 0:
		return fmt.Errorf("--threads: must be ≥ 0, got %d", *threads)
	}
	var r io.Reader = stdin
	if *docsPath != "-" {
		f, err := os.Open(*docsPath)
		if err != nil {
			return fmt.Errorf("--documents: %w", err)
		}
		defer f.Close()
		r = f
	}
	docs, err := readDocuments(r)
	if err != nil {
		return fmt.Errorf("--documents %s: %w", *docsPath, err)
	}
	eng, err := model.Load(*dir, model.Options{MaxTokens: *maxTokens, Threads: *threads, PrefixCacheBytes: 256 << 20})
	if err != nil {
		return err
	}
	defer eng.Close()
	bw := bufio.NewWriter(stdout)
	enc := json.NewEncoder(bw)
	for lo := 0; lo < len(docs); lo += scoreBatch {
		hi := min(lo+scoreBatch, len(docs))
		g, err := eng.Tokenize(*instruction, *query, docs[lo:hi], scorer.TokenizeOptions{})
		if err != nil {
			return err
		}
		if _, err := eng.Forward(ctx, []*scorer.Group{g}); err != nil {
			return err
		}
		for i, l := range g.Logits {
			// truncated_tokens, only when the document was cut to fit --max-tokens: DESIGN says
			// the response says how many tokens were cut; an uncut line keeps the three fields.
			out := struct {
				Index     int     `json:"index"`
				Score     float64 `json:"score"`
				Logit     float32 `json:"logit"`
				Truncated int     `json:"truncated_tokens,omitempty"`
			}{lo + i, model.Sigmoid(float64(l)), l, g.Truncated[i]}
			if err := enc.Encode(&out); err != nil {
				return err
			}
		}
	}
	return bw.Flush()
}

// readDocuments reads one JSON string or {"text": string} per line. Blank lines are errors (a
// document must be explicit, e.g. ""), so that indices always match line numbers.
func readDocuments(r io.Reader) ([]string, error) {
	br := bufio.NewReaderSize(r, 1<<20)
	var docs []string
	for line := 1; ; line++ {
		b, err := br.ReadBytes('\n')
		if len(b) == 0 && err == io.EOF {
			return docs, nil
		}
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		b = bytes.TrimSpace(b)
		var doc string
		switch {
		case len(b) == 0:
			return nil, fmt.Errorf("line %d: empty line (want a JSON string or {\"text\": …})", line)
		case b[0] == '"':
			if err := json.Unmarshal(b, &doc); err != nil {
				return nil, fmt.Errorf("line %d: %w", line, err)
			}
		case b[0] == '{':
			var obj struct {
				Text *string `json:"text"`
			}
			if err := json.Unmarshal(b, &obj); err != nil {
				return nil, fmt.Errorf("line %d: %w", line, err)
			}
			if obj.Text == nil {
				return nil, fmt.Errorf("line %d: object has no \"text\" string", line)
			}
			doc = *obj.Text
		default:
			return nil, fmt.Errorf("line %d: want a JSON string or {\"text\": …}", line)
		}
		docs = append(docs, doc)
		if err == io.EOF {
			return docs, nil
		}
	}
}
