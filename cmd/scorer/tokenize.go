package main

import (
	"fmt"
	"io"
	"os"

	"github.com/relevance-scoring/relevance/internal/cli"
	"github.com/relevance-scoring/relevance/tokenizer"
)

// runTokenize implements `scorer tokenize` (a contract: tools and tests call it).
func runTokenize(args []string) error { return tokenizeCmd(args, os.Stdin, os.Stdout) }

func tokenizeCmd(args []string, stdin io.Reader, stdout io.Writer) error {
	fs := cli.NewFlagSet("scorer", "tokenize", "[--tokenizer PATH] [--no-special] < strings.jsonl\n\n"+
		"Reads one JSON string per line on stdin and prints one JSON array of token ids per line.\n"+
		"By default added/special tokens written in the text (<|im_start|>, <think>, ...) map to their\n"+
		"ids, as Hugging Face does; --no-special treats all text as plain text.")
	path := fs.String("tokenizer", "", "tokenizer.json or a model folder holding one (default: the shipped Qwen3 tokenizer)")
	noSpecial := fs.Bool("no-special", false, "treat added/special token text as plain text")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q (input comes from stdin)", fs.Args())
	}
	var (
		tok *tokenizer.Tokenizer
		err error
	)
	if *path == "" {
		tok, err = tokenizer.Default()
	} else {
		tok, err = tokenizer.LoadFile(*path)
	}
	if err != nil {
		return err
	}
	return tokenizer.EncodeJSONLines(tok, stdin, stdout, *noSpecial)
}
