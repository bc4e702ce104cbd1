package zero

import (
	"errors"

	"github.com/dszero/dszero/mem"
)

func asOOM(err error, target **mem.OOMError) bool { return errors.As(err, target) }
