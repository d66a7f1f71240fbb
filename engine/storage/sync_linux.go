package storage

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// fdatasync flushes the file's data and the metadata needed to read it back
// (its size), skipping timestamps.
func fdatasync(f *os.File) error {
	return onFD(f, syscall.Fdatasync)
}

// fallocate reserves size bytes of disk for f from offset 0 and sets its size
// (mode 0: the range reads as zeros).
func fallocate(f *os.File, size int64) error {
	return onFD(f, func(fd int) error { return syscall.Fallocate(fd, 0, 0, size) })
}

// startWriteback starts writing the dirty pages of [off, off+n) to the disk and returns without
// waiting for them (sync_file_range with SYNC_FILE_RANGE_WRITE alone). It reports no write-back
// error: those reach the next fdatasync of the file, as any other write's do.
func startWriteback(f *os.File, off, n int64) error {
	return onFD(f, func(fd int) error { return unix.SyncFileRange(fd, off, n, unix.SYNC_FILE_RANGE_WRITE) })
}

// onFD runs call on f's descriptor, again while it is interrupted (EINTR).
func onFD(f *os.File, call func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		for {
			serr = call(int(fd))
			if serr != syscall.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	return serr
}
