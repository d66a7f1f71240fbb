//go:build linux

package storage

import (
	"errors"
	"os"
	"syscall"
)

// flockExclusive tries to take an exclusive flock on f without waiting: held reports that another
// open file description holds it.
func flockExclusive(f *os.File) (held bool, err error) {
	err = onFD(f, func(fd int) error { return syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB) })
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return true, nil
	}
	return false, err
}

// flockWait takes an exclusive flock on f, waiting for other holders; flockRelease drops it.
func flockWait(f *os.File) error {
	return onFD(f, func(fd int) error {
		for {
			if err := syscall.Flock(fd, syscall.LOCK_EX); !errors.Is(err, syscall.EINTR) {
				return err
			}
		}
	})
}

func flockRelease(f *os.File) error {
	return onFD(f, func(fd int) error { return syscall.Flock(fd, syscall.LOCK_UN) })
}
