package cluster

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestLedgerGivenBackChargesLeaveOnlySurvivorsAtOneInstant: at one instant, leases of several
// plans are charged and a random subset given back, in a random order, interleaved, some sent
// and settled (which rebuilds the finish from the work out: base is then that work). However
// they interleave, the node's load must be its load before them plus the survivors' costs
// (an older charge's take-back takes its cost; the newest restores the finish before it).
func TestLedgerGivenBackChargesLeaveOnlySurvivorsAtOneInstant(t *testing.T) {
	for seed := range uint64(2000) {
		rng := rand.New(rand.NewPCG(seed, 7))
		n := &Node{}
		t0 := time.Now()
		at := func(d float64) time.Time { return t0.Add(time.Duration(d * float64(time.Second))) }
		// Initial state: idle, late (a batch out past its finish) or busy into the future.
		var p0 float64 // the batch out before (never given back nor settled here)
		switch rng.IntN(3) {
		case 1:
			p0 = 1
			n.Charge(t0, p0) // at 3 s it is 2 s late
		case 2:
			p0 = 5
			n.Charge(t0, p0) // at 3 s, 2 s ahead
		}
		now := at(3)
		base := n.Load(now)
		type lease struct {
			c Charge
			p float64
		}
		var out []lease
		var trace []string
		for range 4 + rng.IntN(12) {
			if k := rng.IntN(8); len(out) > 0 && k == 0 {
				// one lease sent and answered now: the finish is rebuilt from the work out
				i := rng.IntN(len(out))
				n.Settle(now, out[i].p)
				trace = append(trace, "S"+string(rune('0'+out[i].c.id%10)))
				out = slices.Delete(out, i, i+1)
				base = p0
			} else if len(out) > 0 && k < 4 {
				i := rng.IntN(len(out))
				n.Uncharge(out[i].c)
				trace = append(trace, "U"+string(rune('0'+out[i].c.id%10)))
				out = slices.Delete(out, i, i+1)
			} else {
				p := 0.05 + rng.Float64()
				out = append(out, lease{n.Charge(now, p), p})
				trace = append(trace, "C"+string(rune('0'+out[len(out)-1].c.id%10)))
			}
			want := base
			for _, l := range out {
				want += l.p
			}
			if got := n.Load(now); math.Abs(got-want) > 1e-9 {
				t.Fatalf("seed %d: after %v load %.6f, want %.6f (before %.6f plus the survivors)", seed, trace, got, want, base)
			}
		}
	}
}

// TestLedgerPlanGivenBackRestoresLoadUnderRandomInterleavings: random interleavings over time of
// Charge (leases of several plans), Uncharge (a refused plan's leases, any order) and Settle (a
// sent lease's reply). Whenever the leases outstanding are again exactly those outstanding just
// before some plan's first charge, with no Settle since, the ledger must read as it did then
// (Load at that instant is a pure function of the ledger). Invariants: inflight and out match
// the leases outstanding; the stack never holds more than the charges since the last Settle.
func TestLedgerPlanGivenBackRestoresLoadUnderRandomInterleavings(t *testing.T) {
	for seed := range uint64(3000) {
		rng := rand.New(rand.NewPCG(seed, 11))
		n := &Node{}
		t0 := time.Now()
		clk := 0.0
		at := func(d float64) time.Time { return t0.Add(time.Duration(d * float64(time.Second))) }
		type lease struct {
			c    Charge
			p    float64
			plan int
		}
		type snap struct {
			at      float64
			load    float64
			out     []uint64 // ids outstanding then
			settles uint64
		}
		var out []lease
		var snaps []snap
		var trace []string
		ids := func() []uint64 {
			s := make([]uint64, 0, len(out))
			for _, l := range out {
				s = append(s, l.c.id)
			}
			slices.Sort(s)
			return s
		}
		plans := 0
		for range 40 {
			clk += rng.Float64() * 0.3
			now := at(clk)
			switch k := rng.IntN(10); {
			case k < 4 || len(out) == 0: // a plan of 1-3 leases (or one more lease of the newest)
				plans++
				snaps = append(snaps, snap{at: clk, load: n.Load(now), out: ids(), settles: n.book().settles})
				for range 1 + rng.IntN(3) {
					p := 0.05 + rng.Float64()*0.5
					out = append(out, lease{n.Charge(now, p), p, plans})
					trace = append(trace, "C")
				}
			case k < 8: // give back one lease
				i := rng.IntN(len(out))
				n.Uncharge(out[i].c)
				out = slices.Delete(out, i, i+1)
				trace = append(trace, "U")
			default: // one lease was sent and answered
				i := rng.IntN(len(out))
				n.Settle(now, out[i].p)
				out = slices.Delete(out, i, i+1)
				trace = append(trace, "S")
			}
			l := n.book()
			var inflight float64
			for _, o := range out {
				inflight += o.p
			}
			if l.out != len(out) || math.Abs(l.inflight-inflight) > 1e-9 {
				t.Fatalf("seed %d %v: out %d inflight %.6f, want %d %.6f", seed, trace, l.out, l.inflight, len(out), inflight)
			}
			if got := n.Load(now); math.IsNaN(got) || got < 0 {
				t.Fatalf("seed %d %v: load %v", seed, trace, got)
			}
			cur := ids()
			for _, s := range snaps {
				if s.settles == l.settles && slices.Equal(s.out, cur) {
					if got := n.Load(at(s.at)); math.Abs(got-s.load) > 1e-9 {
						t.Fatalf("seed %d %v: back to the leases out at %.3f s: load there %.6f, want %.6f", seed, trace, s.at, got, s.load)
					}
				}
			}
		}
	}
}

// TestGivingBackAnOlderLeaseThenTheNewestLeavesNoPhantomWork: plan P's leases a and c are
// charged around request Q's lease b (all at one instant on an idle node); P is refused and
// gives back a, then c. Only b's 0.2 s is left; the finish c restores must not still hold a's.
func TestGivingBackAnOlderLeaseThenTheNewestLeavesNoPhantomWork(t *testing.T) {
	n := &Node{}
	now := time.Now()
	a := n.Charge(now, 0.5)
	n.Charge(now, 0.2) // b, sent
	c := n.Charge(now, 0.3)
	n.Uncharge(a)
	n.Uncharge(c)
	if got := n.Load(now); math.Abs(got-0.2) > 1e-9 {
		t.Errorf("load %.3f s with only b's 0.2 s out, want 0.2 (a's 0.5 s left as phantom work)", got)
	}
}

// BenchmarkChargeWithoutSettle: a node whose batches do not come back (stalled) keeps being
// charged; each Charge copies the whole stack of charges since the last Settle.
func BenchmarkChargeWithoutSettle(b *testing.B) {
	for _, k := range []int{10, 1000, 10000} {
		b.Run(fmt.Sprint(k), func(b *testing.B) {
			n := &Node{}
			now := time.Now()
			for range k {
				n.Charge(now, 0.01)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				c := n.Charge(now, 0.01)
				n.Uncharge(c)
			}
		})
	}
}
