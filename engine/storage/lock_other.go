//go:build !linux

package storage

import (
	"errors"
	"os"
)

func flockExclusive(*os.File) (bool, error) {
	return false, errors.New("directory locks are implemented for Linux only")
}

func flockWait(*os.File) error {
	return errors.New("directory locks are implemented for Linux only")
}

func flockRelease(*os.File) error { return nil }
