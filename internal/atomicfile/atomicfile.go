// Package atomicfile writes a file so that readers see either the old file or the whole new one:
// the content goes to a temporary file beside it, which is then renamed into place. A process
// that has the old file open or memory-mapped keeps its (now unlinked) copy, and processes
// writing the same path at once leave one whole file, the last renamed. Safe for concurrent use.
package atomicfile

import (
	"io"
	"os"
	"path/filepath"
)

// Write creates or replaces path with what write writes. On any error nothing replaces path and
// the temporary file is removed.
func Write(path string, write func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	err = write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}
