package fakecu

import (
	"fmt"
	"sync"

	"github.com/dszero/dszero/cuda/driver"
	"github.com/dszero/dszero/cuda/kernels"
)

// Options describe the fake machine.
type Options struct {
	Devices       int    // number of GPUs; 0 means 1
	Name          string // device name; "" means "Fake GPU (dszero)"
	Major, Minor  int    // compute capability; 0.0 means 9.0
	Memory        uint64 // bytes of device memory per GPU; 0 means 1 GiB
	PinnedLimit   uint64 // bytes of pinned host memory; 0 means unlimited
	DriverVersion int    // cuDriverGetVersion; 0 means 12080
	SMs           int    // multiprocessors; 0 means 132
}

// Driver is a driver.Driver over Go memory. Device memory is Go byte
// arrays behind fake addresses that are never reused, so a stale pointer
// faults; each stream is a goroutine running its operations in order;
// kernels run their Go references from package kernels. Faults are
// sticky, as on a GPU: once a kernel touches memory outside an
// allocation every later call fails.
type Driver struct {
	opt Options
	tab *kernels.Table

	mu       sync.Mutex
	inited   bool
	sticky   *driver.Error
	current  map[int]driver.Context // per OS thread
	ctxRefs  []int                  // primary context retain count per device
	allocs   allocTable
	host     map[uintptr]*hostAlloc
	pinned   uint64
	pools    []*pool
	streams  map[driver.Stream]*stream
	events   map[driver.Event]*event
	modules  map[driver.Module]*module
	funcs    map[driver.Function]funcEntry
	next     uintptr // handle counter
	launches map[string]int
	failNext map[string]int // injected failures: call name → count
}

var _ driver.Driver = (*Driver)(nil)

// New returns a fake driver; call Init first, as with the real one.
func New(o Options) *Driver {
	if o.Devices == 0 {
		o.Devices = 1
	}
	if o.Name == "" {
		o.Name = "Fake GPU (dszero)"
	}
	if o.Major == 0 {
		o.Major, o.Minor = 9, 0
	}
	if o.Memory == 0 {
		o.Memory = 1 << 30
	}
	if o.DriverVersion == 0 {
		o.DriverVersion = 12080
	}
	if o.SMs == 0 {
		o.SMs = 132
	}
	d := &Driver{
		opt: o, tab: kernels.NewTable(),
		current: map[int]driver.Context{}, ctxRefs: make([]int, o.Devices),
		host: map[uintptr]*hostAlloc{}, streams: map[driver.Stream]*stream{}, events: map[driver.Event]*event{},
		modules: map[driver.Module]*module{}, funcs: map[driver.Function]funcEntry{},
		next: 0x1000, launches: map[string]int{}, failNext: map[string]int{},
	}
	for i := range o.Devices {
		d.pools = append(d.pools, &pool{dev: i, capacity: o.Memory, threshold: 0})
	}
	return d
}

// errorOf builds the *driver.Error a real driver would return.
func errorOf(fn string, r driver.Result) *driver.Error {
	name, msg := driver.CUResultName(r)
	return &driver.Error{Lib: driver.LibCUDA, Func: fn, Code: r, Name: name, Msg: msg}
}

func (d *Driver) handle() uintptr {
	d.next += 0x10
	return d.next
}

// enter checks the state every call needs, under d.mu: initialised, no
// sticky error, no injected failure, and (with ctx) a current context on
// this thread. It returns the current context's device.
func (d *Driver) enter(fn string, ctx bool) (int, error) {
	if !d.inited {
		return 0, errorOf(fn, driver.ErrNotInitialized)
	}
	if d.sticky != nil {
		e := *d.sticky
		e.Func = fn
		return 0, &e
	}
	if k := d.failNext[fn]; k > 0 {
		d.failNext[fn] = k - 1
		return 0, errorOf(fn, driver.ErrOutOfMemory)
	}
	if !ctx {
		return 0, nil
	}
	c, ok := d.current[threadID()]
	if !ok || c == 0 {
		return 0, errorOf(fn, driver.ErrInvalidContext)
	}
	return int(c>>32) - 1, nil
}

// setSticky records a fault: every later call fails with it.
func (d *Driver) setSticky(e *driver.Error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.sticky == nil {
		d.sticky = e
	}
}

// FailNext makes the next n calls of the named driver function (e.g.
// "cuMemAllocFromPoolAsync", "cuMemHostAlloc") fail with
// CUDA_ERROR_OUT_OF_MEMORY.
func (d *Driver) FailNext(fn string, n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.failNext[fn] += n
}

// Launches returns how many times each kernel has run.
func (d *Driver) Launches() map[string]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string]int{}
	for k, v := range d.launches {
		out[k] = v
	}
	return out
}

func (d *Driver) Init() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.inited = true
	return nil
}

func (d *Driver) DriverVersion() (int, error) { return d.opt.DriverVersion, nil }

func (d *Driver) DeviceCount() (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.enter("cuDeviceGetCount", false); err != nil {
		return 0, err
	}
	return d.opt.Devices, nil
}

func (d *Driver) DeviceGet(ordinal int) (driver.Device, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.enter("cuDeviceGet", false); err != nil {
		return 0, err
	}
	if ordinal < 0 || ordinal >= d.opt.Devices {
		return 0, errorOf("cuDeviceGet", driver.ErrInvalidDevice)
	}
	return driver.Device(ordinal), nil
}

func (d *Driver) checkDevice(fn string, dev driver.Device) error {
	if _, err := d.enter(fn, false); err != nil {
		return err
	}
	if int(dev) < 0 || int(dev) >= d.opt.Devices {
		return errorOf(fn, driver.ErrInvalidDevice)
	}
	return nil
}

func (d *Driver) DeviceName(dev driver.Device) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkDevice("cuDeviceGetName", dev); err != nil {
		return "", err
	}
	return d.opt.Name, nil
}

func (d *Driver) DeviceAttribute(a driver.DeviceAttr, dev driver.Device) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkDevice("cuDeviceGetAttribute", dev); err != nil {
		return 0, err
	}
	switch a {
	case driver.AttrComputeCapabilityMajor:
		return d.opt.Major, nil
	case driver.AttrComputeCapabilityMinor:
		return d.opt.Minor, nil
	case driver.AttrMultiprocessorCount:
		return d.opt.SMs, nil
	case driver.AttrMaxThreadsPerBlock:
		return 1024, nil
	case driver.AttrWarpSize:
		return 32, nil
	case driver.AttrMaxSharedMemoryPerBlock:
		return 48 << 10, nil
	case driver.AttrMaxSharedMemoryPerBlockOp:
		return 227 << 10, nil
	case driver.AttrMemoryPoolsSupported, driver.AttrUnifiedAddressing:
		return 1, nil
	case driver.AttrClockRate:
		return 1980000, nil
	case driver.AttrPCIBusID:
		return int(dev) + 1, nil
	}
	return 0, errorOf("cuDeviceGetAttribute", driver.ErrInvalidValue)
}

func (d *Driver) DeviceTotalMem(dev driver.Device) (uint64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkDevice("cuDeviceTotalMem", dev); err != nil {
		return 0, err
	}
	return d.opt.Memory, nil
}

// A context handle encodes its device: (device+1) << 32.
func ctxOf(dev int) driver.Context { return driver.Context(uintptr(dev+1) << 32) }

func (d *Driver) PrimaryCtxRetain(dev driver.Device) (driver.Context, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkDevice("cuDevicePrimaryCtxRetain", dev); err != nil {
		return 0, err
	}
	d.ctxRefs[dev]++
	return ctxOf(int(dev)), nil
}

func (d *Driver) PrimaryCtxRelease(dev driver.Device) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkDevice("cuDevicePrimaryCtxRelease", dev); err != nil {
		return err
	}
	if d.ctxRefs[dev] == 0 {
		return errorOf("cuDevicePrimaryCtxRelease", driver.ErrInvalidContext)
	}
	d.ctxRefs[dev]--
	return nil
}

// ContextRefs returns the primary context's retain count of device dev.
func (d *Driver) ContextRefs(dev int) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ctxRefs[dev]
}

func (d *Driver) CtxSetCurrent(c driver.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.enter("cuCtxSetCurrent", false); err != nil {
		return err
	}
	dev := int(c>>32) - 1
	if c != 0 && (dev < 0 || dev >= d.opt.Devices || d.ctxRefs[dev] == 0 || c != ctxOf(dev)) {
		return errorOf("cuCtxSetCurrent", driver.ErrInvalidContext)
	}
	d.current[threadID()] = c
	return nil
}

func (d *Driver) CtxSynchronize() error {
	d.mu.Lock()
	dev, err := d.enter("cuCtxSynchronize", true)
	var ss []*stream
	for _, s := range d.streams {
		if s.dev == dev {
			ss = append(ss, s)
		}
	}
	d.mu.Unlock()
	if err != nil {
		return err
	}
	for _, s := range ss {
		s.drain()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.pools[dev].synchronized()
	return d.stickyErr("cuCtxSynchronize")
}

func (d *Driver) stickyErr(fn string) error {
	if d.sticky != nil {
		e := *d.sticky
		e.Func = fn
		return &e
	}
	return nil
}

func (d *Driver) MemGetInfo() (free, total uint64, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	dev, err := d.enter("cuMemGetInfo", true)
	if err != nil {
		return 0, 0, err
	}
	p := d.pools[dev]
	return p.capacity - p.reserved, p.capacity, nil
}

func (d *Driver) String() string {
	return fmt.Sprintf("fakecu(%d × %s sm_%d%d)", d.opt.Devices, d.opt.Name, d.opt.Major, d.opt.Minor)
}

// lockedHandle returns a fresh handle, taking d.mu.
func (d *Driver) lockedHandle() uintptr {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.handle()
}
