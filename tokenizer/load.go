package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
)

// Tokenizer is a loaded byte-level BPE tokenizer. It is immutable after Load (apart from an
// internal, bounded word cache) and safe for concurrent use.
type Tokenizer struct {
	vocab *vocabTable // token text as stored (byte-level characters) <-> id, model vocab only

	added       []addedToken       // sorted by id
	addedByText map[string]int32   // content -> id
	addedFirst  [256][]*addedToken // candidates by first byte, longest content first

	merges         pairTable
	byteID         [256]int32                // id of the single-byte token for each byte
	bytePairs      []uint64                  // [b1<<8|b2] -> rank<<32|merged id of the byte tokens' merge
	ignoreMerges   bool                      // a word that is a whole vocab entry maps to it directly
	split          func(s string, i int) int // pre-tokenizer: end of the piece starting at s[i]
	addPrefixSpace bool                      // GPT-2 ByteLevel(add_prefix_space): text gets a leading space
	nfc            bool                      // normalizer is NFC (otherwise none)
	vocabSize      int

	decodeOnce sync.Once
	decodeOff  []uint32 // id -> offset of its bytes in decodeBuf; len = vocabSize+1
	decodeBuf  []byte

	cache *wordCache
}

type addedToken struct {
	ID         int32  `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

// qwenPattern is the Split regex of the Qwen2/Qwen3 pre-tokenizer (scan.go: nextPiece);
// gpt2Pattern is the one built into ByteLevel(use_regex=true) (nextPieceGPT2).
const (
	qwenPattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
)

// maxTokenID bounds ids so that a corrupt file cannot make Load allocate gigabytes for its
// id-indexed tables; real vocabularies stay far below (Qwen: 151,668).
const maxTokenID = 1<<22 - 1

// LoadFile loads a tokenizer.json file, or the tokenizer.json inside a model folder.
func LoadFile(path string) (*Tokenizer, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer: %w", err)
	}
	if fi.IsDir() {
		path = filepath.Join(path, "tokenizer.json")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer: %w", err)
	}
	t, err := Load(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// Load parses the bytes of a Hugging Face tokenizer.json. It accepts the byte-level BPE family:
// model type BPE (merges as "a b" strings or ["a","b"] pairs), an NFC or absent normalizer, the
// Qwen2/Qwen3 split pattern followed by ByteLevel, or GPT-2's ByteLevel with its own regex, and
// added tokens (without lstrip/rstrip/single_word). Anything else is reported as unsupported
// rather than tokenized wrongly.
func Load(data []byte) (*Tokenizer, error) {
	t := &Tokenizer{addedByText: map[string]int32{}, cache: newWordCache()}
	s := &jsonScanner{data: data}
	var (
		sawModel           bool
		rawAdded, rawNorm  []byte
		rawPre, rawDecoder []byte
		mergesSeen         bool
	)
	err := s.object(func(key string) error {
		var err error
		switch key {
		case "added_tokens":
			rawAdded, err = s.skipValue()
		case "normalizer":
			rawNorm, err = s.skipValue()
		case "pre_tokenizer":
			rawPre, err = s.skipValue()
		case "decoder":
			rawDecoder, err = s.skipValue()
		case "model":
			sawModel = true
			mergesSeen, err = t.parseModel(s)
			if err != nil {
				err = fmt.Errorf("model: %w", err)
			}
		default:
			_, err = s.skipValue()
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("parse tokenizer.json: %w", err)
	}
	if s.peek() != 0 {
		return nil, fmt.Errorf("parse tokenizer.json: %w", errTrailing)
	}
	if !sawModel || t.vocab == nil {
		return nil, errors.New("parse tokenizer.json: no model.vocab")
	}
	if !mergesSeen {
		return nil, errors.New("parse tokenizer.json: no model.merges")
	}
	if err := t.setNormalizer(rawNorm); err != nil {
		return nil, err
	}
	if err := t.setPreTokenizer(rawPre); err != nil {
		return nil, err
	}
	if err := checkDecoder(rawDecoder); err != nil {
		return nil, err
	}
	if err := t.setAdded(rawAdded); err != nil {
		return nil, err
	}
	for b := range 256 {
		id, ok := t.vocab.get(string(byteToRune[b]))
		if !ok {
			return nil, fmt.Errorf("model.vocab: no token for byte 0x%02x (%q): not a byte-level BPE vocabulary", b, byteToRune[b])
		}
		t.byteID[b] = id
	}
	// Every word starts as single bytes, so a third of all pair lookups are byte pairs: a dense
	// 512 KB table answers them from cache instead of the 4 MB hash table.
	t.bytePairs = make([]uint64, 1<<16)
	for i := range t.bytePairs {
		r, m := t.merges.get(t.byteID[i>>8], t.byteID[i&0xff])
		t.bytePairs[i] = uint64(r)<<32 | uint64(uint32(m))
	}
	return t, nil
}

// parseModel reads the model object; it reports whether merges were present.
func (t *Tokenizer) parseModel(s *jsonScanner) (bool, error) {
	var (
		rawMerges []byte
		typ       string
	)
	err := s.object(func(key string) error {
		switch key {
		case "type":
			b, err := s.str()
			typ = string(b)
			return err
		case "vocab":
			return t.parseVocab(s)
		case "merges":
			// Merges refer to vocab entries; the vocab usually comes first, but JSON objects
			// are unordered, so keep the raw bytes and parse after the object.
			var err error
			rawMerges, err = s.skipValue()
			return err
		case "byte_fallback":
			raw, err := s.skipValue()
			if err == nil && string(raw) == "true" {
				return errors.New("byte_fallback=true is not supported (byte-level BPE needs none)")
			}
			return err
		case "ignore_merges":
			raw, err := s.skipValue()
			t.ignoreMerges = string(raw) == "true"
			return err
		case "continuing_subword_prefix", "end_of_word_suffix":
			if s.isNull() {
				return nil
			}
			b, err := s.str()
			if err == nil && len(b) > 0 {
				return fmt.Errorf("%s=%q is not supported", key, b)
			}
			return err
		default:
			_, err := s.skipValue()
			return err
		}
	})
	if err != nil {
		return false, err
	}
	if typ != "" && typ != "BPE" {
		return false, fmt.Errorf("type %q is not supported, want BPE", typ)
	}
	if t.vocab == nil {
		return false, errors.New("no vocab")
	}
	if rawMerges == nil {
		return false, nil
	}
	return true, t.parseMerges(rawMerges)
}

func (t *Tokenizer) parseVocab(s *jsonScanner) error {
	var b vocabBuilder
	b.arena = make([]byte, 0, len(s.data)/8)
	if err := s.expect('{'); err != nil {
		return fmt.Errorf("vocab: %w", err)
	}
	if s.peek() != '}' {
		for {
			key, err := s.str()
			if err != nil {
				return fmt.Errorf("vocab: %w", err)
			}
			if err := s.expect(':'); err != nil {
				return fmt.Errorf("vocab %q: %w", key, err)
			}
			id, err := s.int()
			if err != nil {
				return fmt.Errorf("vocab %q: %w", key, err)
			}
			if id > maxTokenID {
				return fmt.Errorf("vocab %q: id %d is over the limit %d", key, id, maxTokenID)
			}
			if err := b.add(key, id); err != nil {
				return fmt.Errorf("vocab id %d: %w", id, err)
			}
			if s.peek() != ',' {
				break
			}
			s.pos++
		}
	}
	if err := s.expect('}'); err != nil {
		return fmt.Errorf("vocab: %w", err)
	}
	if len(b.ids) == 0 {
		return errors.New("vocab: empty")
	}
	v, err := b.build()
	if err != nil {
		return fmt.Errorf("vocab: %w", err)
	}
	t.vocab = v
	return nil
}

func (t *Tokenizer) parseMerges(raw []byte) error {
	s := &jsonScanner{data: raw}
	t.merges = newPairTable(bytes.Count(raw, []byte{','}) / 2)
	var abuf, cat []byte
	err := s.array(func(i int) error {
		var a, b []byte
		switch s.peek() {
		case '"': // legacy form "a b"
			line, err := s.str()
			if err != nil {
				return err
			}
			sp := bytes.IndexByte(line, ' ')
			if sp <= 0 || sp == len(line)-1 || bytes.IndexByte(line[sp+1:], ' ') >= 0 {
				return fmt.Errorf("merge %d: %q is not two tokens separated by one space", i, line)
			}
			a, b = line[:sp], line[sp+1:]
		case '[': // newer form ["a", "b"]
			s.pos++
			x, err := s.str()
			if err != nil {
				return err
			}
			abuf = append(abuf[:0], x...) // x may point into the scratch buffer the next str reuses
			if err := s.expect(','); err != nil {
				return err
			}
			y, err := s.str()
			if err != nil {
				return err
			}
			if err := s.expect(']'); err != nil {
				return fmt.Errorf("merge %d: want a pair: %w", i, err)
			}
			a, b = abuf, y
		default:
			return fmt.Errorf("merge %d: want a string or a pair", i)
		}
		ida, ok := t.vocab.getBytes(a)
		if !ok {
			return fmt.Errorf("merge %d: token %q is not in the vocab", i, a)
		}
		idb, ok := t.vocab.getBytes(b)
		if !ok {
			return fmt.Errorf("merge %d: token %q is not in the vocab", i, b)
		}
		cat = append(append(cat[:0], a...), b...)
		idab, ok := t.vocab.getBytes(cat)
		if !ok {
			return fmt.Errorf("merge %d: merged token %q is not in the vocab", i, cat)
		}
		t.merges.put(ida, idb, uint32(i), idab)
		return nil
	})
	if err != nil {
		return fmt.Errorf("merges: %w", err)
	}
	if s.peek() != 0 {
		return errors.New("merges: trailing data")
	}
	return nil
}

func (t *Tokenizer) setNormalizer(raw []byte) error {
	if raw == nil || string(raw) == "null" {
		return nil
	}
	var n struct {
		Type        string            `json:"type"`
		Normalizers []json.RawMessage `json:"normalizers"`
	}
	if err := json.Unmarshal(raw, &n); err != nil {
		return fmt.Errorf("normalizer: %w", err)
	}
	switch n.Type {
	case "NFC":
		t.nfc = true
		return nil
	case "Sequence":
		for _, sub := range n.Normalizers {
			if err := t.setNormalizer(sub); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("normalizer: type %q is not supported (only NFC)", n.Type)
}

type preTokJSON struct {
	Type    string `json:"type"`
	Pattern struct {
		Regex  *string `json:"Regex"`
		String *string `json:"String"`
	} `json:"pattern"`
	Behavior       string       `json:"behavior"`
	Invert         bool         `json:"invert"`
	AddPrefixSpace bool         `json:"add_prefix_space"`
	UseRegex       *bool        `json:"use_regex"`
	PreTokenizers  []preTokJSON `json:"pretokenizers"`
}

// setPreTokenizer accepts the two byte-level pipelines the scanners implement: Qwen's
// Split(qwenPattern, Isolated) + ByteLevel(use_regex=false), and GPT-2's ByteLevel with its
// built-in regex (or the same regex as an explicit Split). Anything else would be tokenized
// wrongly, so it is an error.
func (t *Tokenizer) setPreTokenizer(raw []byte) error {
	if raw == nil || string(raw) == "null" {
		return errors.New("pre_tokenizer: missing; want the Qwen Split + ByteLevel sequence or GPT-2's ByteLevel")
	}
	var p preTokJSON
	if err := json.Unmarshal(raw, &p); err != nil {
		return fmt.Errorf("pre_tokenizer: %w", err)
	}
	steps := []preTokJSON{p}
	if p.Type == "Sequence" {
		steps = p.PreTokenizers
	}
	isSplit := func(st preTokJSON, pattern string) bool {
		return st.Type == "Split" && st.Pattern.Regex != nil && *st.Pattern.Regex == pattern &&
			st.Behavior == "Isolated" && !st.Invert
	}
	byteLevel := func(st preTokJSON, useRegex bool) bool {
		return st.Type == "ByteLevel" && (st.UseRegex == nil || *st.UseRegex) == useRegex
	}
	switch {
	case len(steps) == 2 && isSplit(steps[0], qwenPattern) && byteLevel(steps[1], false) && !steps[1].AddPrefixSpace:
		t.split = nextPiece
	case len(steps) == 2 && isSplit(steps[0], gpt2Pattern) && byteLevel(steps[1], false) && !steps[1].AddPrefixSpace:
		t.split = nextPieceGPT2
	case len(steps) == 1 && byteLevel(steps[0], true):
		t.split = nextPieceGPT2
		t.addPrefixSpace = steps[0].AddPrefixSpace
	default:
		return fmt.Errorf("pre_tokenizer: unsupported %s; want Split(Qwen pattern, Isolated) + ByteLevel(use_regex=false, add_prefix_space=false), or ByteLevel(use_regex=true)", raw)
	}
	return nil
}

func checkDecoder(raw []byte) error {
	if raw == nil || string(raw) == "null" {
		return nil
	}
	var d struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		return fmt.Errorf("decoder: %w", err)
	}
	if d.Type != "ByteLevel" {
		return fmt.Errorf("decoder: type %q is not supported, want ByteLevel", d.Type)
	}
	return nil
}

func (t *Tokenizer) setAdded(raw []byte) error {
	t.vocabSize = t.vocab.size()
	if raw == nil || string(raw) == "null" {
		return nil
	}
	if err := json.Unmarshal(raw, &t.added); err != nil {
		return fmt.Errorf("added_tokens: %w", err)
	}
	slices.SortFunc(t.added, func(a, b addedToken) int { return int(a.ID - b.ID) })
	for i := range t.added {
		a := &t.added[i]
		if a.Content == "" {
			return fmt.Errorf("added_tokens: id %d has empty content", a.ID)
		}
		if a.ID < 0 || a.ID > maxTokenID {
			return fmt.Errorf("added_tokens: %q has id %d, want 0..%d", a.Content, a.ID, maxTokenID)
		}
		if a.SingleWord || a.LStrip || a.RStrip {
			return fmt.Errorf("added_tokens: %q: single_word, lstrip and rstrip are not supported", a.Content)
		}
		if prev, dup := t.addedByText[a.Content]; dup && prev != a.ID {
			return fmt.Errorf("added_tokens: %q listed with ids %d and %d", a.Content, prev, a.ID)
		}
		t.addedByText[a.Content] = a.ID
		t.vocabSize = max(t.vocabSize, int(a.ID)+1)
		fb := a.Content[0]
		t.addedFirst[fb] = append(t.addedFirst[fb], a)
	}
	for i := range t.addedFirst {
		// Longest first: Hugging Face matches added tokens leftmost-longest.
		slices.SortStableFunc(t.addedFirst[i], func(a, b *addedToken) int { return len(b.Content) - len(a.Content) })
	}
	return nil
}

// TokenID returns the id of a token given as it appears in tokenizer.json (a vocab entry in
// byte-level characters, e.g. "yes" or "Ġyes", or an added token such as "<|im_end|>").
func (t *Tokenizer) TokenID(tok string) (int32, bool) {
	if id, ok := t.addedByText[tok]; ok {
		return id, true
	}
	return t.vocab.get(tok)
}

// VocabSize is the highest token id + 1, added tokens included.
func (t *Tokenizer) VocabSize() int { return t.vocabSize }
