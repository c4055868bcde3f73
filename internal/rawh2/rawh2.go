// Package rawh2 is a hand-driven HTTP/2 connection to a gRPC server, for tests that play a
// hostile client: it opens streams and sends what it likes — headers without a deadline, part of
// a message and then nothing, more streams than the server allows — ignoring the server's
// settings (not even acknowledged). Only tests import it.
//
// A Conn is not safe for concurrent use: drive it from the test's goroutine.
package rawh2

import (
	"bytes"
	"encoding/binary"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Conn is an HTTP/2 connection that the test drives frame by frame.
type Conn struct {
	t    testing.TB
	conn net.Conn
	fr   *http2.Framer
	// Frames are what the server sent, in order; closed when the connection is.
	Frames <-chan Frame
}

// Frame is what the tests read of a frame the server sent (an http2.Frame is valid only until
// the framer reads the next).
type Frame struct {
	Type       http2.FrameType
	Stream     uint32
	Ended      bool          // HEADERS with END_STREAM: the call's trailers
	RST        http2.ErrCode // RST_STREAM's code
	MaxStreams uint32        // a SETTINGS frame's SETTINGS_MAX_CONCURRENT_STREAMS; 0: absent
}

// Dial connects to addr, sends the client preface and empty SETTINGS, and starts reading the
// server's frames into Frames. The connection is closed when the test ends, and within 30 s
// regardless.
func Dial(t testing.TB, addr string) *Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	frames := make(chan Frame, 1024)
	r := &Conn{t: t, conn: c, fr: http2.NewFramer(c, c), Frames: frames}
	r.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if err := r.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(frames)
		for {
			f, err := r.fr.ReadFrame()
			if err != nil {
				return
			}
			fi := Frame{Type: f.Header().Type, Stream: f.Header().StreamID}
			switch f := f.(type) {
			case *http2.MetaHeadersFrame:
				fi.Ended = f.StreamEnded()
			case *http2.RSTStreamFrame:
				fi.RST = f.ErrCode
			case *http2.SettingsFrame:
				if !f.IsAck() {
					fi.MaxStreams, _ = f.Value(http2.SettingMaxConcurrentStreams)
				}
			}
			select {
			case frames <- fi:
			default: // nobody reading that far: drop rather than block the reader
			}
		}
	}()
	return r
}

// Open sends the HEADERS of a gRPC call to method (its full name, "/pkg.Service/Method") on
// stream id (odd, increasing), with no grpc-timeout and no body.
func (r *Conn) Open(id uint32, method string) {
	r.t.Helper()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, kv := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", method},
		{":authority", "x"}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
	}
	if err := r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
		r.t.Fatal(err)
	}
}

// SendPartial sends on stream id the prefix of an uncompressed gRPC message of announced bytes
// and the first sent of them (zeros), without ending the stream: a message that never finishes
// arriving.
func (r *Conn) SendPartial(id uint32, announced, sent int) {
	r.t.Helper()
	b := make([]byte, 5+sent)
	binary.BigEndian.PutUint32(b[1:5], uint32(announced))
	if err := r.fr.WriteData(id, false, b); err != nil {
		r.t.Fatal(err)
	}
}

// WaitEnd waits up to within for the server to end stream id (trailers or RST_STREAM) and
// returns that frame and how long it took; ok is false if it did not end in time. It fails the
// test if the connection closes first.
func (r *Conn) WaitEnd(id uint32, within time.Duration) (f Frame, took time.Duration, ok bool) {
	r.t.Helper()
	start := time.Now()
	deadline := time.After(within)
	for {
		select {
		case f, open := <-r.Frames:
			if !open {
				r.t.Fatalf("connection closed before stream %d was ended", id)
			}
			if f.Stream == id && (f.Ended || f.Type == http2.FrameRSTStream) {
				return f, time.Since(start), true
			}
		case <-deadline:
			return Frame{}, time.Since(start), false
		}
	}
}

// Refused waits up to within for want streams to be refused (RST_STREAM REFUSED_STREAM) and
// returns how many were, and the SETTINGS_MAX_CONCURRENT_STREAMS the server advertised (0: none
// seen).
func (r *Conn) Refused(want int, within time.Duration) (refused int, advertised uint32) {
	r.t.Helper()
	deadline := time.After(within)
	for refused < want {
		select {
		case f, open := <-r.Frames:
			if !open {
				r.t.Fatal("connection closed")
			}
			if f.MaxStreams != 0 {
				advertised = f.MaxStreams
			}
			if f.Type == http2.FrameRSTStream && f.RST == http2.ErrCodeRefusedStream {
				refused++
			}
		case <-deadline:
			return refused, advertised
		}
	}
	return refused, advertised
}
