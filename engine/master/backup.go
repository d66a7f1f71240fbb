package master

import (
	"context"
	"errors"
	"io/fs"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/region"
	"github.com/cellstore/cellstore/engine/snapshot"
)

// Backups: snapshots copied between the cluster's storage and the backup location
// (Config.Backup) by jobs in the master's background. A call starts a copy unless one runs or is
// done, and answers its progress; a failed copy is started again by the next call, and a copy
// lost with its master (a failover) is started again by the new one — it copies only what the
// other end lacks. Jobs are kept in memory; the last maxCopyJobs are remembered.

const maxCopyJobs = 256

type copyJob struct {
	mu     sync.Mutex
	status *pb.CopySnapshotResponse
	seq    uint64
}

type copyJobs struct {
	mu   sync.Mutex
	jobs map[string]*copyJob // by direction and name
	seq  uint64
	// copies hold it shared; DeleteBackup's prune holds it exclusively (a copy writes its files
	// before its manifest, which a prune would take for unreferenced).
	location sync.RWMutex
}

func (m *Master) backupStorage() (region.Storage, error) {
	if m.cfg.Backup == nil {
		return region.Storage{}, errPrecondition("this cluster has no backup location: start its masters with --backup-dir or --backup-s3-bucket (StoreCluster spec.backup)")
	}
	return region.Storage{Bucket: m.cfg.Backup}, nil
}

func (m *Master) copySnapshot(req *pb.CopySnapshotRequest, export bool) (*pb.CopySnapshotResponse, error) {
	name := req.GetName()
	if err := snapshot.CheckName(name); err != nil {
		return nil, errInvalid("%v", err)
	}
	backup, err := m.backupStorage()
	if err != nil {
		return nil, err
	}
	if err := m.lock(); err != nil {
		return nil, err
	}
	ctx := m.activeCtx
	m.mu.Unlock()
	key := "import/" + name
	if export {
		key = "export/" + name
	}
	c := &m.copies
	c.mu.Lock()
	if c.jobs == nil {
		c.jobs = map[string]*copyJob{}
	}
	src, dst := m.regionStorage(), backup
	if !export {
		src, dst = backup, m.regionStorage()
	}
	j := c.jobs[key]
	if j != nil {
		j.mu.Lock()
		st := j.status.GetState()
		resp := proto.CloneOf(j.status)
		j.mu.Unlock()
		// A finished copy whose snapshot is gone from the destination since (deleted there) is
		// copied again.
		done := st == pb.CopyState_COPY_STATE_DONE
		if st == pb.CopyState_COPY_STATE_RUNNING || done && snapshotAt(dst, name) {
			c.mu.Unlock()
			return resp, nil
		}
	}
	c.seq++
	j = &copyJob{seq: c.seq,
		status: &pb.CopySnapshotResponse{State: pb.CopyState_COPY_STATE_RUNNING, StartedMs: m.clock().UnixMilli()}}
	c.jobs[key] = j
	if len(c.jobs) > maxCopyJobs { // forget the oldest finished job
		var oldest string
		for k, o := range c.jobs {
			o.mu.Lock()
			running := o.status.GetState() == pb.CopyState_COPY_STATE_RUNNING
			o.mu.Unlock()
			if !running && (oldest == "" || o.seq < c.jobs[oldest].seq) {
				oldest = k
			}
		}
		delete(c.jobs, oldest)
	}
	resp := proto.CloneOf(j.status)
	c.mu.Unlock()

	m.activeWG.Add(1)
	go func() {
		defer m.activeWG.Done()
		c.location.RLock()
		defer c.location.RUnlock()
		if !export {
			// Files imported under archive/ must outlive the cleaner's TTL until the manifest names them.
			m.snapGuard.RLock()
			defer m.snapGuard.RUnlock()
		}
		start := time.Now()
		prog, err := snapshot.Copy(ctx, src, dst, name, snapshot.CopyOptions{Progress: func(p snapshot.CopyProgress) {
			j.mu.Lock()
			setProgress(j.status, p)
			j.mu.Unlock()
		}})
		j.mu.Lock()
		defer j.mu.Unlock()
		setProgress(j.status, prog)
		j.status.FinishedMs = m.clock().UnixMilli()
		if err != nil {
			j.status.State, j.status.Error = pb.CopyState_COPY_STATE_FAILED, err.Error()
			m.log.Warn("snapshot copy failed", "snapshot", name, "export", export, "err", err)
			return
		}
		j.status.State = pb.CopyState_COPY_STATE_DONE
		m.log.Info("snapshot copied", "snapshot", name, "export", export, "files", prog.Files, "already_there", prog.Skipped,
			"bytes", prog.Bytes, "took", time.Since(start).Round(time.Millisecond))
	}()
	return resp, nil
}

// snapshotAt says whether a snapshot's manifest is at st (an error looking counts as there: the
// caller's answer stands until it can be checked).
func snapshotAt(st region.Storage, name string) bool {
	_, err := st.StatObject(snapshot.ManifestKey(name))
	return !errors.Is(err, fs.ErrNotExist)
}

func setProgress(s *pb.CopySnapshotResponse, p snapshot.CopyProgress) {
	s.Files, s.FilesTotal, s.Skipped, s.Bytes, s.BytesTotal = int32(p.Files), int32(p.FilesTotal), int32(p.Skipped), p.Bytes, p.BytesTotal
}

// deleteBackup removes a snapshot's manifest from the backup location and the files no other
// snapshot there names.
func (m *Master) deleteBackup(ctx context.Context, req *pb.SnapshotNameRequest) error {
	name := req.GetName()
	if err := snapshot.CheckName(name); err != nil {
		return errInvalid("%v", err)
	}
	backup, err := m.backupStorage()
	if err != nil {
		return err
	}
	if err := m.lock(); err != nil {
		return err
	}
	m.mu.Unlock()
	locked := make(chan struct{})
	go func() { m.copies.location.Lock(); close(locked) }()
	select {
	case <-locked:
	case <-ctx.Done():
		go func() { <-locked; m.copies.location.Unlock() }()
		return errDetail(pb.ErrorCode_ERROR_CODE_FAILED_PRECONDITION, true, "copies to the backup location are running: retry when they are done")
	}
	defer m.copies.location.Unlock()
	if _, err := backup.ReadObject(snapshot.ManifestKey(name)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return errSnapshotNotFound(name)
		}
		return err
	}
	if err := snapshot.Delete(backup, name); err != nil {
		return err
	}
	n, err := snapshot.Prune(backup)
	if errors.Is(err, snapshot.ErrCopyUnderway) {
		// Another process copies to the location (a deposed master, the CLI, another cluster):
		// the snapshot is gone, its files wait for the next deletion's prune.
		m.log.Warn("backup deleted; its files stay at the location until the next deletion", "snapshot", name, "reason", err)
		n, err = 0, nil
	}
	if err != nil {
		return err
	}
	m.copies.mu.Lock()
	delete(m.copies.jobs, "export/"+name)
	m.copies.mu.Unlock()
	m.log.Info("backup deleted", "snapshot", name, "files_deleted", n)
	return nil
}
