package emulated

import (
	"github.com/relevance-scoring/relevance/scorer"
	"github.com/relevance-scoring/relevance/scorer/prefixcache"
)

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
		t := g.TemplateSplit()
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
