package cluster

import "testing"

// TestDrainRepliesDoNotSurviveARestart: a draining node's health goes NOT_SERVING first and the
// batches it was running answer after, with the old process's model fingerprint and prefixes.
// When the node comes back (a restart, possibly on new weights and always with an empty prefix
// cache) neither may still be believed: its model would pin requests and key the score cache
// under the old identity, and affinity would credit prefixes the new process never computed.
func TestDrainRepliesDoNotSurviveARestart(t *testing.T) {
	n := &Node{}
	const key = 42
	n.setHealthy(true, func() {})
	n.SetFingerprint("model-a")
	n.Remember(key, true)

	n.setHealthy(false, func() {}) // drain: health goes first ...
	n.SetFingerprint("model-a")    // ... the running batch answers after it
	n.Remember(key, true)
	n.setHealthy(true, func() {}) // back, restarted

	if fp := n.Fingerprint(); fp != "" {
		t.Errorf("restarted node still known as %q: its model is unknown until it answers", fp)
	}
	if n.Holds(key) {
		t.Error("restarted node still believed to hold a prefix its old process computed")
	}
}
