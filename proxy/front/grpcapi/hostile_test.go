package grpcapi

import (
	"bytes"
	"context"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
)

// rawH2 is a hand-driven HTTP/2 connection to the server, as a hostile client drives one: it
// opens streams and sends what it likes, ignoring the server's settings (not even acknowledged:
// the framer is written from the test's goroutine only).
type rawH2 struct {
	t      *testing.T
	conn   net.Conn
	fr     *http2.Framer
	frames chan frameInfo
}

// frameInfo is what the tests read of a frame the server sent (a Frame is valid only until the
// framer reads the next).
type frameInfo struct {
	typ        http2.FrameType
	stream     uint32
	ended      bool          // HEADERS with END_STREAM: the call's trailers
	rst        http2.ErrCode // RST_STREAM's code
	maxStreams uint32        // a SETTINGS frame's SETTINGS_MAX_CONCURRENT_STREAMS; 0: absent
}

func dialRawH2(t *testing.T, addr string) *rawH2 {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	r := &rawH2{t: t, conn: c, fr: http2.NewFramer(c, c), frames: make(chan frameInfo, 1024)}
	r.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if err := r.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(r.frames)
		for {
			f, err := r.fr.ReadFrame()
			if err != nil {
				return
			}
			fi := frameInfo{typ: f.Header().Type, stream: f.Header().StreamID}
			switch f := f.(type) {
			case *http2.MetaHeadersFrame:
				fi.ended = f.StreamEnded()
			case *http2.RSTStreamFrame:
				fi.rst = f.ErrCode
			case *http2.SettingsFrame:
				if !f.IsAck() {
					fi.maxStreams, _ = f.Value(http2.SettingMaxConcurrentStreams)
				}
			}
			r.frames <- fi
		}
	}()
	return r
}

// open sends the HEADERS of a Ranker/Score call on stream id, with no grpc-timeout and no body.
func (r *rawH2) open(id uint32) {
	r.t.Helper()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, kv := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", relevancev1.Ranker_Score_FullMethodName},
		{":authority", "x"}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
	}
	if err := r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
		r.t.Fatal(err)
	}
}

// TestStalledRequestMessageIsCutOff: a Score call whose request message never finishes arriving
// (headers, then part of the message, then nothing, and no deadline of its own) is ended by the
// server within grpc.recv_timeout. The handler, where the SLO applies, has not started: before
// the fix nothing bounded the wait, and the stream — with the bytes it buffered, up to
// max_recv_bytes — stayed until the client closed the connection.
func TestStalledRequestMessageIsCutOff(t *testing.T) {
	cfg := testConfig()
	cfg.RecvTimeout = 300 * time.Millisecond
	called := make(chan struct{}, 1)
	e := start(t, cfg, &fakeCore{fn: func(ctx context.Context, req *relevancev1.ScoreRequest) (*relevancev1.ScoreResponse, error) {
		called <- struct{}{}
		return echoScores(ctx, req)
	}})
	r := dialRawH2(t, e.conn.Target())
	r.open(1)
	// A message of 1000 bytes announced, 10 sent.
	if err := r.fr.WriteData(1, false, append([]byte{0, 0, 0, 0x03, 0xe8}, make([]byte, 10)...)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	deadline := time.After(3 * time.Second)
	for {
		select {
		case f, ok := <-r.frames:
			if !ok {
				t.Fatal("connection closed before the stream was ended")
			}
			if f.stream != 1 {
				continue
			}
			if f.ended || f.typ == http2.FrameRSTStream {
				t.Logf("stream ended after %s: trailers %v, RST_STREAM %v", time.Since(start).Round(time.Millisecond), f.ended, f.rst)
				if waited := time.Since(start); waited > 2*time.Second {
					t.Errorf("stream ended after %s, want about recv_timeout (300ms)", waited)
				}
				select {
				case <-called:
					t.Error("the core was called for a request that never arrived")
				default:
				}
				return
			}
		case <-deadline:
			t.Fatalf("stream with a stalled request message still open after %s (recv_timeout 300ms)", time.Since(start).Round(time.Millisecond))
		}
	}
}

// TestStreamsPerConnectionAreCapped: one connection cannot open more than
// grpc.max_concurrent_streams calls at once; a client that ignores the advertised limit has its
// extra streams refused (REFUSED_STREAM, which clients retry) instead of each holding a goroutine
// and buffers on the server. Before the fix there was no limit (grpc-go's default).
func TestStreamsPerConnectionAreCapped(t *testing.T) {
	cfg := testConfig()
	cfg.MaxConcurrentStreams = 4
	e := start(t, cfg, &fakeCore{fn: echoScores})
	r := dialRawH2(t, e.conn.Target())
	const opened = 12
	for i := range opened {
		r.open(uint32(2*i + 1))
	}
	refused := 0
	advertised := uint32(0)
	deadline := time.After(2 * time.Second)
	for refused < opened-int(cfg.MaxConcurrentStreams) {
		select {
		case f, ok := <-r.frames:
			if !ok {
				t.Fatal("connection closed")
			}
			if f.maxStreams != 0 {
				advertised = f.maxStreams
			}
			if f.typ == http2.FrameRSTStream && f.rst == http2.ErrCodeRefusedStream {
				refused++
			}
		case <-deadline:
			t.Fatalf("%d of %d streams refused (advertised SETTINGS_MAX_CONCURRENT_STREAMS %d), want %d refused beyond the limit of %d",
				refused, opened, advertised, opened-int(cfg.MaxConcurrentStreams), cfg.MaxConcurrentStreams)
		}
	}
	if advertised != cfg.MaxConcurrentStreams {
		t.Errorf("SETTINGS_MAX_CONCURRENT_STREAMS = %d, want %d", advertised, cfg.MaxConcurrentStreams)
	}
}
