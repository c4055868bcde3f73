package emulated

import (
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/relevance-scoring/relevance/scorer"
)

// The Qwen3-Reranker prompt around the user part (see DESIGN.md); only its size matters here.
const (
	promptHead         = "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n"
	promptTail         = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
	defaultInstruction = "Given a web search query, retrieve relevant passages that answer the query"
)

// approxTokenizer stands in for the real prompt builder: pieces of words of up to four bytes
// (byte-level BPE on English product text averages about that), each punctuation rune one
// token, whitespace joined to the next piece, a <|control|> token one token. IDs are hashes of the pieces, so equal text gives
// equal tokens; the counts are approximate.
type approxTokenizer struct {
	maxTokens int
}

func approxTokens(s string) []int32 {
	var out []int32
	emit := func(piece string) {
		h := fnv.New32a()
		h.Write([]byte(piece))
		out = append(out, int32(h.Sum32()%150000))
	}
	i := 0
	for i < len(s) {
		if strings.HasPrefix(s[i:], "<|") { // a control token such as <|im_start|> is one token
			if end := strings.Index(s[i:], "|>"); end > 0 {
				emit(s[i : i+end+2])
				i += end + 2
				continue
			}
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		start := i
		for unicode.IsSpace(r) && i+n < len(s) { // whitespace joins what follows
			i += n
			r, n = utf8.DecodeRuneInString(s[i:])
		}
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			j := i
			for j < len(s) {
				r2, n2 := utf8.DecodeRuneInString(s[j:])
				if !(unicode.IsLetter(r2) || unicode.IsDigit(r2)) {
					break
				}
				j += n2
			}
			for k := start; k < j; {
				end := min(k+4, j)
				if k == start {
					end = min(i+4, j)
				}
				for end < j && !utf8.RuneStart(s[end]) {
					end++
				}
				emit(s[k:end])
				k = end
			}
			i = j
			continue
		}
		i += n
		emit(s[start:i])
	}
	return out
}

func (a approxTokenizer) build(instruction, query string, docs []string, opt scorer.TokenizeOptions) (*scorer.Group, error) {
	if query == "" {
		return nil, errors.New("tokenize: empty query")
	}
	if instruction == "" {
		instruction = defaultInstruction
	}
	prefix := approxTokens(promptHead + "<Instruct>: " + instruction + "\n<Query>: " + query + "\n<Document>:")
	tail := approxTokens(promptTail)
	room := a.maxTokens - len(prefix) - len(tail)
	if room < 1 {
		return nil, fmt.Errorf("tokenize: query too long: prompt prefix is %d tokens, limit %d", len(prefix), a.maxTokens)
	}
	if opt.MaxDocTokens > 0 && opt.MaxDocTokens < room {
		room = opt.MaxDocTokens
	}
	g := &scorer.Group{
		Prefix:    prefix,
		Items:     make([][]int32, len(docs)),
		Truncated: make([]int, len(docs)),
		TooLong:   make([]bool, len(docs)),
	}
	for i, d := range docs {
		doc := approxTokens(" " + d)
		if len(doc) > room {
			if opt.NoTruncate {
				g.TooLong[i] = true
				continue
			}
			g.Truncated[i] = len(doc) - room
			doc = doc[:room]
		}
		g.Items[i] = append(doc, tail...)
	}
	return g, nil
}
