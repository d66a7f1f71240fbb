package storage

import (
	"os"
	"syscall"
)

// fdatasync flushes the file's data and the metadata needed to read it back
// (its size), skipping timestamps.
func fdatasync(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		for {
			serr = syscall.Fdatasync(int(fd))
			if serr != syscall.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	return serr
}

// fallocate reserves size bytes of disk for f from offset 0 and sets its size
// (mode 0: the range reads as zeros).
func fallocate(f *os.File, size int64) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		for {
			serr = syscall.Fallocate(int(fd), 0, 0, size)
			if serr != syscall.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	return serr
}
