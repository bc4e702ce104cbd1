package cuda

import (
	"fmt"
	"slices"
	"time"

	"github.com/dszero/dszero/cuda/driver"
	"github.com/dszero/dszero/cuda/kernels"
)

// Kernels is dszero's kernel module loaded on a device: compiled by NVRTC
// for the device's own architecture at first use (or read from the disk
// cache), loaded with cuModuleLoadData. Its methods launch the kernels
// through an Issuer.
type Kernels struct {
	d     *Device
	tab   *kernels.Table
	mod   driver.Module
	funcs map[string]driver.Function // resolved lazily, on the worker
	Info  CompileInfo
}

// CompileInfo says how the module was obtained.
type CompileInfo struct {
	Arch       int      // sm_XY as XY
	NVRTC      [2]int   // NVRTC version
	Options    []string // compiler options
	CachePath  string   // the cache file, "" without a cache
	CacheHit   bool     // loaded from the cache, no compilation
	CacheError error    // writing the cache failed (the module still works)
	Log        string   // NVRTC's log, if it said anything
	Duration   time.Duration
}

// compiled is the outcome of compiling, kept for every later caller.
type compiled struct {
	cubin []byte
	info  CompileInfo
	err   error
}

// compile produces the CUBIN (from the cache if possible). It needs no
// context and may run on any goroutine.
func (d *Device) compile() compiled {
	start := time.Now()
	nv := d.libs.NVRTC
	info := CompileInfo{Arch: d.Arch(), Options: kernels.Options(d.Arch())}
	var err error
	if info.NVRTC[0], info.NVRTC[1], err = nv.Version(); err != nil {
		return compiled{err: fmt.Errorf("cuda: %w", err)}
	}
	archs, err := nv.SupportedArchs()
	if err != nil {
		return compiled{err: fmt.Errorf("cuda: %w", err)}
	}
	if !slices.Contains(archs, info.Arch) {
		return compiled{err: fmt.Errorf("cuda: NVRTC %d.%d cannot generate code for sm_%d (it supports %v): install an NVRTC of CUDA %d.x or newer, no newer than the driver",
			info.NVRTC[0], info.NVRTC[1], info.Arch, archs, info.NVRTC[0])}
	}
	src := kernels.Source()
	key := cacheKey(info.Arch, info.Options, info.NVRTC[0], info.NVRTC[1], kernels.ModuleName, src)
	if dir := cacheDir(d.cfg.CacheDir); dir != "" {
		info.CachePath = cachePath(dir, info.Arch, key)
		if cubin := cacheLoad(info.CachePath, key); cubin != nil {
			info.CacheHit = true
			info.Duration = time.Since(start)
			return compiled{cubin: cubin, info: info}
		}
	}
	cubin, log, err := nv.Compile(src, kernels.ModuleName, info.Options)
	info.Log = log
	if err != nil {
		return compiled{info: info, err: fmt.Errorf("cuda: compiling %s for sm_%d with NVRTC %d.%d: %w\n%s",
			kernels.ModuleName, info.Arch, info.NVRTC[0], info.NVRTC[1], err, log)}
	}
	if info.CachePath != "" {
		info.CacheError = cacheStore(info.CachePath, key, cubin)
	}
	info.Duration = time.Since(start)
	return compiled{cubin: cubin, info: info}
}

// LoadKernels compiles (or reads from the cache) and loads the kernels.
// Call it once at start-up: compilation runs here, off the worker, where it
// delays nobody. A launch before it loads them itself, on the worker.
func (d *Device) LoadKernels() (*Kernels, error) {
	d.kernelsOnce.Do(func() { d.compiled = d.compile() })
	var k *Kernels
	err := d.Do(func(q *Issuer) (err error) {
		k, err = q.loadKernels()
		return err
	})
	return k, err
}

// loadKernels loads the module on the worker, compiling first if needed.
func (q *Issuer) loadKernels() (*Kernels, error) {
	d := q.d
	if d.kernels != nil {
		return d.kernels, nil
	}
	d.kernelsOnce.Do(func() { d.compiled = d.compile() })
	c := d.compiled
	if c.err != nil {
		return nil, c.err
	}
	mod, err := q.drv.ModuleLoadData(c.cubin)
	if err != nil {
		return nil, fmt.Errorf("cuda: loading the sm_%d kernels (NVRTC %d.%d): %w", c.info.Arch, c.info.NVRTC[0], c.info.NVRTC[1], err)
	}
	d.kernels = &Kernels{d: d, tab: kernels.NewTable(), mod: mod, funcs: map[string]driver.Function{}, Info: c.info}
	return d.kernels, nil
}

// function resolves a kernel by name (on the worker).
func (k *Kernels) function(q *Issuer, name string) (driver.Function, error) {
	if f, ok := k.funcs[name]; ok {
		return f, nil
	}
	f, err := q.drv.ModuleGetFunction(k.mod, name)
	if err != nil {
		return 0, fmt.Errorf("cuda: kernel %s: %w", name, err)
	}
	k.funcs[name] = f
	return f, nil
}

// Table is the launcher table of the loaded kernels.
func (k *Kernels) Table() *kernels.Table { return k.tab }

func (k *Kernels) unload() error {
	err := k.d.libs.Driver.ModuleUnload(k.mod)
	k.d.kernels = nil
	return err
}
