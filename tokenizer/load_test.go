package tokenizer

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// tinyJSON builds a small byte-level tokenizer.json: the 256 byte tokens (ids 0..255), then one
// token per merge, and the given added tokens. legacy writes merges as "a b" strings.
func tinyJSON(tb testing.TB, merges [][2]string, legacy bool, edit func(m map[string]any)) []byte {
	tb.Helper()
	vocab := map[string]int{}
	for b := range 256 {
		vocab[string(byteToRune[b])] = b
	}
	ms := []any{}
	for _, m := range merges {
		if _, ok := vocab[m[0]+m[1]]; !ok {
			vocab[m[0]+m[1]] = len(vocab)
		}
		if legacy {
			ms = append(ms, m[0]+" "+m[1])
		} else {
			ms = append(ms, []string{m[0], m[1]})
		}
	}
	doc := map[string]any{
		"version": "1.0",
		"added_tokens": []map[string]any{
			{"id": 1000, "content": "<|x|>", "special": true},
			{"id": 1001, "content": "<|xy|>", "special": true},
		},
		"normalizer": map[string]any{"type": "NFC"},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": qwenPattern}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		}},
		"decoder": map[string]any{"type": "ByteLevel"},
		"model":   map[string]any{"type": "BPE", "vocab": vocab, "merges": ms, "byte_fallback": false, "dropout": nil, "continuing_subword_prefix": "", "end_of_word_suffix": ""},
	}
	if edit != nil {
		edit(doc)
	}
	data, err := json.Marshal(doc)
	if err != nil {
		tb.Fatal(err)
	}
	return data
}

var tinyMerges = [][2]string{{"l", "o"}, {"lo", "w"}, {"Ġ", "low"}, {"e", "r"}, {"low", "er"}, {"Ġ", "Ġ"}}

func TestLoadMergeForms(t *testing.T) {
	legacy, err := Load(tinyJSON(t, tinyMerges, true, nil))
	if err != nil {
		t.Fatalf("legacy merges: %v", err)
	}
	pairs, err := Load(tinyJSON(t, tinyMerges, false, nil))
	if err != nil {
		t.Fatalf("pair merges: %v", err)
	}
	low, _ := pairs.TokenID("low")
	lowGlued, _ := pairs.TokenID("Ġlow")
	lower, _ := pairs.TokenID("lower")
	for _, tc := range []struct {
		text string
		want []int32
	}{
		{"low", []int32{low}},
		{" low", []int32{lowGlued}},
		{"lower", []int32{lower}},
		{"lowx", []int32{low, 'x'}},
		{"<|xy|><|x|>", []int32{1001, 1000}}, // longest added token first
		{"<|x", []int32{'<', '|', 'x'}},
	} {
		for name, tok := range map[string]*Tokenizer{"legacy": legacy, "pairs": pairs} {
			if diff := cmp.Diff(tc.want, tok.Encode(tc.text)); diff != "" {
				t.Errorf("%s: Encode(%q) (-want +got):\n%s", name, tc.text, diff)
			}
		}
	}
	if got := pairs.VocabSize(); got != 1002 {
		t.Errorf("VocabSize = %d, want 1002 (highest added id + 1)", got)
	}
}

func TestLoadErrors(t *testing.T) {
	setModel := func(k string, v any) func(map[string]any) {
		return func(m map[string]any) { m["model"].(map[string]any)[k] = v }
	}
	tests := []struct {
		name    string
		data    []byte
		wantErr string
	}{
		{"not json", []byte("{nope"), "parse tokenizer.json"},
		{"empty", nil, "parse tokenizer.json"},
		{"trailing data", append(tinyJSON(t, tinyMerges, false, nil), []byte(" {}")...), "trailing data"},
		{"no model", tinyJSON(t, tinyMerges, false, func(m map[string]any) { delete(m, "model") }), "no model.vocab"},
		{"wordpiece", tinyJSON(t, tinyMerges, false, setModel("type", "WordPiece")), `type "WordPiece" is not supported`},
		{"no merges", tinyJSON(t, tinyMerges, false, func(m map[string]any) { delete(m["model"].(map[string]any), "merges") }), "no model.merges"},
		{"merge not in vocab", tinyJSON(t, tinyMerges, false, setModel("merges", []any{[]string{"l", "zz"}})), `token "zz" is not in the vocab`},
		{"bad legacy merge", tinyJSON(t, tinyMerges, false, setModel("merges", []any{"lo"})), "not two tokens"},
		{"merge is a number", tinyJSON(t, tinyMerges, false, setModel("merges", []any{7})), "want a string or a pair"},
		{"byte fallback", tinyJSON(t, tinyMerges, false, setModel("byte_fallback", true)), "byte_fallback"},
		{"subword prefix", tinyJSON(t, tinyMerges, false, setModel("continuing_subword_prefix", "##")), "continuing_subword_prefix"},
		{"huge id", tinyJSON(t, tinyMerges, false, setModel("vocab", map[string]any{"a": 2147483647})), "over the limit"},
		{"huge added id", tinyJSON(t, tinyMerges, false, func(m map[string]any) {
			m["added_tokens"] = []map[string]any{{"id": 1 << 30, "content": "<x>"}}
		}), "want 0.."},
		{"duplicate vocab id", tinyJSON(t, tinyMerges, false, setModel("vocab", map[string]any{"a": 1, "b": 1})), "used by both"},
		{"negative id", tinyJSON(t, tinyMerges, false, setModel("vocab", map[string]any{"a": -1})), "non-negative integer"},
		{"missing byte token", tinyJSON(t, nil, false, setModel("vocab", map[string]any{"a": 0})), "no token for byte"},
		{"lowercase normalizer", tinyJSON(t, tinyMerges, false, func(m map[string]any) { m["normalizer"] = map[string]any{"type": "Lowercase"} }), `normalizer: type "Lowercase"`},
		{"whitespace pre-tokenizer", tinyJSON(t, tinyMerges, false, func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Whitespace"}
		}), "pre_tokenizer: unsupported"},
		{"other split pattern", tinyJSON(t, tinyMerges, false, func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{
				map[string]any{"type": "Split", "pattern": map[string]any{"Regex": `\w+`}, "behavior": "Isolated"},
				map[string]any{"type": "ByteLevel", "use_regex": false},
			}}
		}), "pre_tokenizer: unsupported"},
		{"wordpiece decoder", tinyJSON(t, tinyMerges, false, func(m map[string]any) { m["decoder"] = map[string]any{"type": "WordPiece"} }), `decoder: type "WordPiece"`},
		{"lstrip added token", tinyJSON(t, tinyMerges, false, func(m map[string]any) {
			m["added_tokens"] = []map[string]any{{"id": 1000, "content": "<x>", "lstrip": true}}
		}), "not supported"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(tc.data)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Load error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestJSONEscapes: vocab keys written with \u escapes (surrogate pairs included) load the same.
func TestJSONEscapes(t *testing.T) {
	s := &jsonScanner{data: []byte(`"a\u0120b\ud83d\ude80\n\"\\\/" `)}
	got, err := s.str()
	if err != nil {
		t.Fatal(err)
	}
	if want := "aĠb🚀\n\"\\/"; string(got) != want {
		t.Errorf("str = %q, want %q", got, want)
	}
	for _, bad := range []string{`"abc`, `"\x"`, `"\u12"`, `"\`} {
		s := &jsonScanner{data: []byte(bad)}
		if _, err := s.str(); err == nil {
			t.Errorf("str(%q): no error", bad)
		}
	}
}

// TestLegacyMergesManyMerges: the legacy "a b" form has half as many commas per merge as the pair
// form, so the pair table's size hint is low and it must grow.
func TestLegacyMergesManyMerges(t *testing.T) {
	var merges [][2]string
	for i := range 2000 {
		a, b := string(byteToRune[i%256]), string(byteToRune[(i/256)%256])
		merges = append(merges, [2]string{a, b})
	}
	tok, err := Load(tinyJSON(t, merges, true, nil))
	if err != nil {
		t.Fatal(err)
	}
	if tok.merges.n != len(merges) {
		t.Errorf("pair table holds %d merges, want %d", tok.merges.n, len(merges))
	}
}

// FuzzLoad: no input makes Load panic or hang.
func FuzzLoad(f *testing.F) {
	f.Add(tinyJSON(f, tinyMerges, false, nil))
	f.Add(tinyJSON(f, tinyMerges, true, nil))
	f.Add([]byte(`{"model":{"vocab":{"a":0},"merges":[]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tok, err := Load(data)
		if err != nil {
			return
		}
		ids := tok.Encode("Hello <|x|> wörld 123")
		_ = tok.Decode(ids)
	})
}
