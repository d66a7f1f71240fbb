package storage

import (
	"errors"
	"sync/atomic"
	"syscall"
)

// volumeErrors counts the errors of Local's files and directories (the shared volume) that say the
// volume is failing rather than that a name is missing or taken: I/O errors, a full or read-only
// volume, lost permissions, a stale or lost network mount. Every Local operation's error passes
// through pathErr, which counts them.
var volumeErrors atomic.Int64

// VolumeErrors is the number of failing-volume errors of this process's local files so far.
func VolumeErrors() int64 { return volumeErrors.Load() }

// noteVolumeError counts err if it says the volume is failing.
func noteVolumeError(err error) {
	for _, e := range failingVolume {
		if errors.Is(err, e) {
			volumeErrors.Add(1)
			return
		}
	}
}

var failingVolume = []error{syscall.EIO, syscall.ENOSPC, syscall.EDQUOT, syscall.EROFS, syscall.EACCES, syscall.EPERM,
	syscall.ESTALE, syscall.ENOTCONN, syscall.ETIMEDOUT}
