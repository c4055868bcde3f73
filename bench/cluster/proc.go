package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Proc is one supervised child process. Its stdout and stderr go to a log file and to a ring of
// the last lines (shown when it dies). It runs in its own process group, so a terminal's Ctrl-C
// reaches only the supervisor, which then stops children in order; on Linux it is also killed
// when the supervisor dies (Pdeathsig). Methods are safe for concurrent use.
type Proc struct {
	Name    string
	LogPath string
	cmd     *exec.Cmd
	done    chan struct{}
	err     error // exit status, valid after done is closed
	tail    *ring
	logFile *os.File
	stopped sync.Once
}

// StartProc starts bin with args; output goes to logPath (created) and the tail ring.
func StartProc(name, bin string, args []string, logPath string) (*Proc, error) {
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	f, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{Name: name, LogPath: logPath, done: make(chan struct{}), tail: newRing(40), logFile: f}
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = sysProcAttr()
	pr, pw := io.Pipe()
	cmd.Stdout = pw
	cmd.Stderr = pw
	p.cmd = cmd
	if err := startLocked(cmd); err != nil {
		f.Close()
		pw.Close()
		return nil, fmt.Errorf("start %s (%s): %w", name, bin, err)
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.tail.add(line)
			fmt.Fprintln(f, line)
		}
		_, _ = io.Copy(io.Discard, pr) // an over-long line: keep draining so the child never blocks
	}()
	go func() {
		p.err = cmd.Wait()
		pw.Close()
		<-copied
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// Pid is the child's process id (also its process group id).
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited and its output is flushed.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err is the exit status (nil for a clean exit); valid after Done.
func (p *Proc) Err() error { return p.err }

// Tail returns the last lines of output.
func (p *Proc) Tail() []string { return p.tail.lines() }

// Stop sends SIGTERM to the process group, waits up to grace, then SIGKILLs the group. It
// returns when the process has exited.
func (p *Proc) Stop(grace time.Duration) {
	p.stopped.Do(func() {
		select {
		case <-p.done:
			return
		default:
		}
		_ = signalGroup(p.Pid(), syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(grace):
			_ = signalGroup(p.Pid(), syscall.SIGKILL)
			<-p.done
		}
	})
	<-p.done
	// Whatever the child left in its group (grandchildren) goes too.
	_ = signalGroup(p.Pid(), syscall.SIGKILL)
}

// Describe explains an exit with the last lines of output.
func (p *Proc) Describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s exited", p.Name)
	if p.err != nil {
		fmt.Fprintf(&b, " (%v)", p.err)
	}
	fmt.Fprintf(&b, "; last lines of %s:\n", p.LogPath)
	for _, l := range p.Tail() {
		fmt.Fprintf(&b, "  | %s\n", l)
	}
	return b.String()
}

// WaitReady polls url until it answers 200, the process exits, or ctx ends.
func WaitReady(ctx context.Context, p *Proc, url string) error {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{Proxy: nil}}
	defer client.CloseIdleConnections()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if resp, err := client.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.Done():
			return errors.New(p.Describe())
		case <-ctx.Done():
			return fmt.Errorf("%s not ready at %s: %w", p.Name, url, ctx.Err())
		case <-tick.C:
		}
	}
}

// ring keeps the last n lines.
type ring struct {
	mu  sync.Mutex
	buf []string
	n   int
}

func newRing(n int) *ring { return &ring{n: n} }

func (r *ring) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.buf) == r.n {
		copy(r.buf, r.buf[1:])
		r.buf = r.buf[:r.n-1]
	}
	r.buf = append(r.buf, s)
}

func (r *ring) lines() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.buf...)
}
