package checkpoint_test

import (
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// evictCache drops the files of dir (recursively) from the page cache, so
// that a load after a save reads them from the disk as a resumed run's
// does: the saved files are synced, so their pages are clean and the
// kernel drops them (POSIX_FADV_DONTNEED). No privilege needed, and no
// other file is touched.
func evictCache(dir string) error {
	return filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || !fi.Mode().IsRegular() {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := f.Sync(); err != nil {
			return err
		}
		return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	})
}

const evictsCache = true
