package grpcapi

import (
	"errors"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// pingStorm opens a raw HTTP/2 connection to addr, sends n PINGs back to back with no call open
// (as a client with keepalive PermitWithoutStream does, only faster), and reports whether the
// server answered with GOAWAY ENHANCE_YOUR_CALM ("too_many_pings"). grpc-go's own client cannot
// ping more often than every 10 s, which would make this test take half a minute.
func pingStorm(t *testing.T, addr string, n int) (goAway bool) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	// Read every frame until the server hangs up or the deadline passes; pings are sent while
	// reading, each after the previous one's ACK.
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	sent, acked := 0, 0
	send := func() {
		if sent < n {
			sent++
			if err := fr.WritePing(false, [8]byte{byte(sent)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	send()
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && acked < n {
				t.Fatalf("only %d of %d pings acknowledged", acked, n)
			}
			return false
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if f.IsAck() {
				if acked++; acked == n {
					// Give a GOAWAY queued after the last ACK time to arrive.
					_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
				}
				send()
			}
		case *http2.GoAwayFrame:
			if f.ErrCode == http2.ErrCodeEnhanceYourCalm {
				return true
			}
		}
	}
}

// TestKeepaliveMinTimeZeroAcceptsAnyPingInterval: grpc.keepalive_min_time validates as ≥ 0, and
// 0 reads as "no minimum", but grpc-go replaces an EnforcementPolicy.MinTime of 0 with its
// default of 5 minutes — the very policy this key exists to relax, which answers a backend
// pinging every 10 s with GOAWAY too_many_pings and fails its calls. An operator who wrote 0 to
// accept any interval got the strictest one. The 10 s case shows the storm is one the server
// does refuse when a minimum is in force.
func TestKeepaliveMinTimeZeroAcceptsAnyPingInterval(t *testing.T) {
	for _, tc := range []struct {
		minTime    time.Duration
		wantGoAway bool
	}{
		{0, false},
		{10 * time.Second, true},
	} {
		t.Run(tc.minTime.String(), func(t *testing.T) {
			cfg := testConfig()
			cfg.KeepaliveMinTime = tc.minTime
			cfg.KeepalivePermitWithoutStream = true
			e := start(t, cfg, &fakeCore{fn: echoScores})
			if got := pingStorm(t, e.conn.Target(), 6); got != tc.wantGoAway {
				t.Errorf("keepalive_min_time %v: GOAWAY too_many_pings = %v, want %v", tc.minTime, got, tc.wantGoAway)
			}
		})
	}
}
