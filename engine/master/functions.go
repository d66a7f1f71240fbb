package master

import (
	"context"
	"crypto/sha256"
	"errors"
	"io/fs"
	"path"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/compute/function"
	"github.com/cellstore/cellstore/engine/layout"
)

// storeFunctions checks the functions of a table descriptor a client sent (docs/functions.md)
// and stores the modules it carries under functions/<sha256>.wasm, leaving only their digests
// in the descriptor the catalog keeps: the catalog and every region open stay small, and every
// server and replica reads the same bytes. A function sent without its module must name one
// already stored. A master that is not active stores nothing (its callers' requests are refused).
func (m *Master) storeFunctions(ctx context.Context, td *pb.TableDescriptor) error {
	if m.status.Load() != stateActive {
		return m.notActive()
	}
	fns := td.GetFunctions()
	if len(fns) == 0 {
		return nil
	}
	if err := function.Check(ctx, fns); err != nil {
		return errInvalid("table %s: %v", layout.TableKey(td.GetName()), err)
	}
	st := m.regionStorage()
	for _, f := range fns {
		if len(f.GetModule()) == 0 {
			key := layout.FunctionModuleKey(f.GetSha256())
			size, err := st.StatObject(key)
			if errors.Is(err, fs.ErrNotExist) {
				size, err = st.StatObject(path.Join("archive", key))
			}
			if errors.Is(err, fs.ErrNotExist) {
				return errInvalid("table %s: function %q names module %x, which this cluster does not have: send the module", layout.TableKey(td.GetName()), f.GetName(), f.GetSha256())
			}
			if err != nil {
				return err
			}
			// Its limits may have changed (MEMORY_MB): the stored module must still fit them.
			wasm, err := st.ReadObject(key)
			if errors.Is(err, fs.ErrNotExist) {
				wasm, err = st.ReadObject(path.Join("archive", key))
			}
			if err != nil {
				return err
			}
			if err := function.CheckModule(ctx, f, wasm); err != nil {
				return errInvalid("table %s: %v", layout.TableKey(td.GetName()), err)
			}
			f.Size = size
			continue
		}
		sum := sha256.Sum256(f.GetModule())
		key := layout.FunctionModuleKey(sum[:])
		// Content-addressed: a module stored before under its digest is the same bytes.
		if err := st.WriteObject(key, f.GetModule(), true); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		f.Sha256, f.Size, f.Module = sum[:], int64(len(f.GetModule())), nil
		m.log.Info("table function module stored", "table", layout.TableKey(td.GetName()), "function", f.GetName(), "key", key, "bytes", f.GetSize())
	}
	return nil
}
