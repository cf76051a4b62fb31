//go:build !linux

package shm

import (
	"errors"

	"github.com/elasticps/elasticps/van"
)

// Transport is Linux-only (memfd, abstract Unix sockets).
type Transport struct{ van.Transport }

// New reports that the shm van needs Linux.
func New(Config) (*Transport, error) {
	return nil, errors.New("van/shm: the shared-memory van needs Linux (memfd, abstract Unix sockets); use DMLC_PS_VAN_TYPE=tcp")
}
