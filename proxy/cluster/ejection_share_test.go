package cluster

import (
	"testing"
	"time"
)

// TestProbationCountsAgainstTheEjectionShare: a node back from an ejection, on probation, takes
// no batch of a request while another node can (only probes), so it is out of traffic as much as
// an ejected one. Not counted in max_ejection_percent, the share let the next slow node be
// ejected meanwhile, and every slow node in turn: with one ejection allowed, two of three nodes
// sat out of traffic and the third took every batch.
func TestProbationCountsAgainstTheEjectionShare(t *testing.T) {
	base := 50 * time.Millisecond
	c := startCluster(t, 3, OutlierConfig{ConsecutiveSlow: 3, BaseEjection: base, MaxEjection: 10 * base, MaxEjectionPercent: 34})
	nodes := c.Snapshot()
	a, b, d := nodes[0], nodes[1], nodes[2]
	t0 := time.Now()
	c.ReportOK(b, t0, t0, 1)
	c.ReportOK(d, t0, t0, 1)
	for range 3 {
		c.ReportSlow(a, t0, 5)
	}
	if !a.Ejected(t0) {
		t.Fatal("three slow outcomes did not eject the node")
	}
	time.Sleep(base + 10*time.Millisecond) // a is back, on probation, no probe yet
	now := time.Now()
	for range 3 {
		c.ReportSlow(b, now, 20)
	}
	if got := c.Eligible(nil); len(got) < 2 {
		t.Errorf("one ejection allowed (34%% of 3 nodes), yet %d of 3 nodes take batches: b ejected %v while a is on probation",
			len(got), b.Ejected(now))
	}
	// a's probe is slow again: it goes back out (its own probation does not count against it).
	c.ReportSlow(a, now, 50)
	if !a.Ejected(now) {
		t.Error("on probation, a slow probe did not eject the node again")
	}
}

// TestEjectionMultiplierIsForgivenAfterAQuietSpell: the n-th ejection lasts n × base_ejection so
// that a node that keeps failing stays out longer; one that ended its probation and then served
// well for longer than max_ejection starts again from base_ejection. The count was reset only
// when the probation itself ended max_ejection after the ejection — never under traffic, where
// the first probe follows at once — so a node's rare slow spells, weeks apart, each cost it
// max_ejection of traffic.
func TestEjectionMultiplierIsForgivenAfterAQuietSpell(t *testing.T) {
	base := 50 * time.Millisecond
	c := startCluster(t, 2, OutlierConfig{ConsecutiveSlow: 1, BaseEjection: base, MaxEjection: 4 * base, MaxEjectionPercent: 50})
	a, b := c.Snapshot()[0], c.Snapshot()[1]
	t0 := time.Now()
	c.ReportOK(b, t0, t0, 1)
	c.ReportSlow(a, t0, 5)
	if !a.Ejected(t0) {
		t.Fatal("not ejected")
	}
	// Probed at once when back, in time: the probation ends.
	back := t0.Add(base + time.Millisecond)
	c.ReportOK(a, back, back.Add(time.Millisecond), 1)
	if a.probation.Load() {
		t.Fatal("an OK probe left the node on probation")
	}
	// An hour of good service, then one slow spell.
	later := t0.Add(time.Hour)
	for i := range 10 {
		at := later.Add(time.Duration(i) * time.Second)
		c.ReportOK(a, at, at, 1)
	}
	c.ReportOK(b, later, later, 1)
	spell := later.Add(time.Minute)
	c.ReportSlow(a, spell, 5)
	if !a.Ejected(spell) {
		t.Fatal("not ejected again")
	}
	if a.Ejected(spell.Add(base + time.Millisecond)) {
		t.Errorf("after an hour of good service the next ejection lasts %v, want base_ejection (%v)",
			time.Unix(0, a.ejectedUntil.Load()).Sub(spell), base)
	}
}
