package emulated

import (
	"strings"
	"sync"

	"github.com/relevance-scoring/relevance/costmodel"
	"github.com/relevance-scoring/relevance/scorer"
	"github.com/relevance-scoring/relevance/scorer/prefixcache"
	"github.com/relevance-scoring/relevance/scorer/prompt"
	"github.com/relevance-scoring/relevance/tokenizer"
)

// templates is Tokenize's memo of each instruction's template tokens: the prompt up to
// "<Query>:", which every query of the instruction shares. It marks Group.TemplateLen exactly as
// the real engine does (scorer/model: templateTokens.templateLen), so that an emulated node
// reuses the template where a real one would; TestTokenizeMarksTheRealEnginesTemplate compares
// the two. (The rule lives in scorer/model unexported; it is repeated here rather than moved, see
// the package's report to the lead.)
type templates struct {
	tok  *tokenizer.Tokenizer
	head []int32
	mu   sync.Mutex
	m    map[string][]int32
}

// maxTemplateMemo bounds the instructions remembered, as the real engine does: a client sending
// a new instruction per request must not grow the map without end.
const maxTemplateMemo = 256

func newTemplates(tok *tokenizer.Tokenizer) *templates {
	return &templates{tok: tok, head: tok.Encode(prompt.HeadText)}
}

// templateLen is how many leading tokens of prefix (a prompt prefix for instruction) every query
// of the instruction shares: the common part of prefix and the instruction's template tokenized
// alone (byte-level BPE joins the space after "<Query>:" to the query's first word, so the
// boundary is taken in token space).
func (tt *templates) templateLen(instruction string, prefix []int32) int {
	tt.mu.Lock()
	toks, ok := tt.m[instruction]
	tt.mu.Unlock()
	if !ok {
		// The body's text up to the query: what BodyPrefix gives two different queries alike,
		// less the space that joins the query.
		a, b := prompt.BodyPrefix(instruction, "a"), prompt.BodyPrefix(instruction, "b")
		n := commonLen([]byte(a), []byte(b))
		toks = append(append([]int32(nil), tt.head...), tt.tok.EncodePlain(strings.TrimRight(a[:n], " "))...)
		tt.mu.Lock()
		if tt.m == nil || len(tt.m) >= maxTemplateMemo {
			tt.m = map[string][]int32{}
		}
		tt.m[instruction] = toks
		tt.mu.Unlock()
	}
	return commonLen(toks, prefix)
}

func commonLen[T comparable](a, b []T) int {
	n := 0
	for n < min(len(a), len(b)) && a[n] == b[n] {
		n++
	}
	return n
}

// splitAt is g's template length when it splits the prefix (0 < TemplateLen < len(Prefix)),
// else 0: a template as long as the prefix is the whole prefix, looked up as such.
func splitAt(g *scorer.Group) int {
	if g.TemplateLen > 0 && g.TemplateLen < len(g.Prefix) {
		return g.TemplateLen
	}
	return 0
}

// reuse is how one pass has one group's prefix.
type reuse struct {
	// tokens are the leading prefix tokens the pass does not compute (Group.PrefixReused): the
	// whole prefix, the template's, or none.
	tokens int
	// cached: the whole prefix came from the cross-request cache (Group.PrefixCached).
	cached bool
	// res and tres reserve the whole prefix and the template this pass computes; they are
	// filled and published only when the pass succeeds.
	res, tres *prefixcache.Reservation
}

// lookupFunc looks a key up at one cache level: hit when it is published; otherwise res, when
// not nil, is the reservation the pass fills if it succeeds.
type lookupFunc func(level prefixcache.Level, k prefixcache.Key) (hit bool, res *prefixcache.Reservation, err error)

// plan decides, for each group, what the real engine's Forward (scorer/model) would not compute,
// with the same rules: a group's whole prefix is looked up first (published entries), and one
// computed by an earlier group of the pass is shared; when the whole prefix is computed, its
// template is looked up (level template) or shared with an earlier group of the pass that
// computes it, and only the tokens after it are computed. A whole prefix or template is
// marked as the pass's own only when the pass computes it, so that a later group with the same
// key is looked up again after a hit, as the real engine does (and its hit counted alike).
func (e *Engine) plan(groups []*scorer.Group, look lookupFunc) ([]reuse, error) {
	out := make([]reuse, len(groups))
	computes := make(map[prefixcache.Key]bool, 2*len(groups))
	for i, g := range groups {
		P := len(g.Prefix)
		if P == 0 {
			continue
		}
		k := prefixcache.KeyOf(e.modelName, g.Prefix)
		if computes[k] {
			out[i].tokens = P
			continue
		}
		hit, res, err := look(prefixcache.LevelPrefix, k)
		if err != nil {
			return nil, err
		}
		if hit {
			out[i] = reuse{tokens: P, cached: true}
			continue
		}
		computes[k], out[i].res = true, res
		t := splitAt(g)
		if t == 0 {
			continue
		}
		tk := prefixcache.KeyOf(e.modelName, g.Prefix[:t])
		if computes[tk] {
			out[i].tokens = t
			continue
		}
		hit, res, err = look(prefixcache.LevelTemplate, tk)
		if err != nil {
			return nil, err
		}
		if hit {
			out[i].tokens = t
			continue
		}
		computes[tk], out[i].tres = true, res
	}
	return out, nil
}

// groupFeatures is one group's work when its first reused prefix tokens are not computed: the
// rest of the prefix (attending the reused tokens as an item attends its prefix), its scorable
// items, one batch. It is the real engine's accounting (scorer/model.groupFeatures).
func groupFeatures(g *scorer.Group, reused int) costmodel.Features {
	P := len(g.Prefix)
	f := costmodel.BatchFeatures(P, itemLens(g), reused > 0)
	if reused > 0 && reused < P {
		f = f.Add(costmodel.ItemFeatures(reused, P-reused))
	}
	return f
}
