//go:build !linux

package storage

import (
	"errors"
	"os"
)

func fdatasync(f *os.File) error { return f.Sync() }

func fallocate(*os.File, int64) error { return errors.ErrUnsupported }

func startWriteback(*os.File, int64, int64) error { return nil }
