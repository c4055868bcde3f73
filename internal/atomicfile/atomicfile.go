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

// Write creates or replaces path with what write writes, readable by all (0644), as
// os.WriteFile's files usually are: CreateTemp makes its files 0600, and a checkpoint written
// by one user or container could not be read by nodes running as another. On any error nothing
// replaces path and the temporary file is removed.
func Write(path string, write func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	err = f.Chmod(0o644)
	if err == nil {
		err = write(f)
	}
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
