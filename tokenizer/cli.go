package tokenizer

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// EncodeJSONLines is the body of `scorer tokenize`: it reads one JSON string per line from r and
// writes one compact JSON array of ids per line to w (e.g. [9707,1879]). plain selects
// EncodePlain (added-token text is ordinary text) instead of Encode. A line that is not a JSON
// string stops the run with an error naming the line; lines already written stay written.
func EncodeJSONLines(t *Tokenizer, r io.Reader, w io.Writer, plain bool) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	err := encodeJSONLines(t, r, bw, plain)
	if ferr := bw.Flush(); err == nil && ferr != nil {
		err = fmt.Errorf("write: %w", ferr)
	}
	return err
}

func encodeJSONLines(t *Tokenizer, r io.Reader, bw *bufio.Writer, plain bool) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var (
		text string
		out  []byte
		ids  []int32
	)
	for lineNo := 1; ; lineNo++ {
		line, readErr := br.ReadBytes('\n')
		if readErr != nil && !errors.Is(readErr, io.EOF) {
			return fmt.Errorf("read line %d: %w", lineNo, readErr)
		}
		if len(line) == 0 && readErr != nil {
			return nil // clean end of input
		}
		line = bytes.TrimRight(line, "\r\n")
		if trimmed := bytes.TrimSpace(line); len(trimmed) == 0 || trimmed[0] != '"' {
			// Checked here because json.Unmarshal of null into a string is a silent no-op.
			return fmt.Errorf("line %d: want a JSON string, got %.40q", lineNo, trimmed)
		}
		if err := json.Unmarshal(line, &text); err != nil {
			return fmt.Errorf("line %d: want a JSON string: %w", lineNo, err)
		}
		if plain {
			ids = t.AppendPlain(ids[:0], text)
		} else {
			ids = t.Encode(text)
		}
		out = append(out[:0], '[')
		for i, id := range ids {
			if i > 0 {
				out = append(out, ',')
			}
			out = strconv.AppendInt(out, int64(id), 10)
		}
		out = append(out, ']', '\n')
		if _, err := bw.Write(out); err != nil {
			return fmt.Errorf("write: %w", err)
		}
		if readErr != nil {
			return nil
		}
	}
}
