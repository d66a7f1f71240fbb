//go:build !linux

package storage

import (
	"errors"
	"os"
)

func flockExclusive(*os.File) (bool, error) {
	return false, errors.New("directory locks are implemented for Linux only")
}
