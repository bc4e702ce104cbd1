package cuda

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The kernel cache stores each compiled CUBIN in its own file, named by
// the hash of everything that determines it: the architecture, the NVRTC
// options, NVRTC's version and the source (CuPy's scheme). A file is
// written to a temporary name in the cache folder and renamed into place,
// so a reader never sees half a file, and it carries a checksum of its
// content, so a damaged file is recompiled, not loaded.
//
//	file = "dszero-cubin 1\n" + hex(key) + "\n" + sha256(cubin) + cubin

const cacheMagic = "dszero-cubin 1\n"

// cacheKey is the hash a compilation's output depends on.
func cacheKey(arch int, opts []string, nvrtcMajor, nvrtcMinor int, name, src string) string {
	h := sha256.New()
	fmt.Fprintf(h, "arch=%d\nnvrtc=%d.%d\nname=%s\n", arch, nvrtcMajor, nvrtcMinor, name)
	for _, o := range opts {
		fmt.Fprintf(h, "opt=%s\n", o)
	}
	fmt.Fprintf(h, "src=%d\n", len(src))
	h.Write([]byte(src))
	return hex.EncodeToString(h.Sum(nil))
}

// cacheDir resolves Config.CacheDir: "" is the user cache folder, "off"
// is no cache ("" returned).
func cacheDir(cfg string) string {
	switch cfg {
	case "off":
		return ""
	case "":
		base, err := os.UserCacheDir()
		if err != nil {
			return ""
		}
		return filepath.Join(base, "dszero", "cuda")
	}
	return cfg
}

func cachePath(dir string, arch int, key string) string {
	return filepath.Join(dir, fmt.Sprintf("kernels-sm_%d-%s.cubin", arch, key[:24]))
}

// cacheLoad returns the cached CUBIN for key, or nil if there is none or
// it is damaged.
func cacheLoad(path, key string) []byte {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	rest, ok := bytes.CutPrefix(data, []byte(cacheMagic))
	if !ok {
		return nil
	}
	line, rest, ok := bytes.Cut(rest, []byte("\n"))
	if !ok || string(line) != key || len(rest) < sha256.Size {
		return nil
	}
	sum, cubin := rest[:sha256.Size], rest[sha256.Size:]
	if got := sha256.Sum256(cubin); !bytes.Equal(got[:], sum) {
		return nil
	}
	return cubin
}

// cacheStore writes the CUBIN atomically.
func cacheStore(path, key string, cubin []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+strings.TrimSuffix(filepath.Base(path), ".cubin")+"-*")
	if err != nil {
		return err
	}
	sum := sha256.Sum256(cubin)
	var b bytes.Buffer
	b.WriteString(cacheMagic + key + "\n")
	b.Write(sum[:])
	b.Write(cubin)
	_, werr := f.Write(b.Bytes())
	cerr := f.Close()
	if werr != nil || cerr != nil {
		os.Remove(f.Name())
		return fmt.Errorf("writing %s: %v %v", f.Name(), werr, cerr)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		os.Remove(f.Name())
		return err
	}
	return nil
}
