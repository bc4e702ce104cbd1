package cuda

import (
	"github.com/dszero/dszero/device"
	"github.com/dszero/dszero/half"
)

// roundTo is x as a dt tensor holds it.
func roundTo(dt device.DType, x float32) float32 {
	switch dt {
	case device.BF16:
		return half.NearestBF16(x)
	case device.F16:
		return half.NearestF16(x)
	}
	return x
}
