package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// TestWriteReplacesWholeOrNothing: a successful write replaces the file and leaves nothing else
// in the folder; a failed one leaves the old file as it was and no temporary file behind.
func TestWriteReplacesWholeOrNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f.json")
	put := func(s string) func(io.Writer) error {
		return func(w io.Writer) error { _, err := io.WriteString(w, s); return err }
	}
	if err := Write(path, put("old")); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	if err := Write(path, func(w io.Writer) error { _, _ = io.WriteString(w, "half"); return boom }); !errors.Is(err, boom) {
		t.Fatalf("failed write: %v, want its error", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "old" {
		t.Errorf("after a failed write: %q, want the old content", b)
	}
	if err := Write(path, put("new")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "new" {
		t.Errorf("after a write: %q, want the new content", b)
	}
	if es, _ := os.ReadDir(dir); len(es) != 1 {
		t.Errorf("folder holds %d entries, want the file alone", len(es))
	}
}

// TestWrittenFileIsReadableByAll: a file written here (a generated checkpoint, a calibration
// cache) is 0644 like os.WriteFile's, not CreateTemp's 0600, so that nodes running as another
// user can read it.
func TestWrittenFileIsReadableByAll(t *testing.T) {
	path := filepath.Join(t.TempDir(), "model.safetensors")
	if err := Write(path, func(w io.Writer) error { _, err := w.Write([]byte("x")); return err }); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want -rw-r--r--", fi.Mode().Perm())
	}
}
