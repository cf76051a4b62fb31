package main

/*
#include <stdlib.h>
#include "shims.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"slices"
	"unsafe"

	"github.com/elasticps/elasticps/elastic"
)

// cMigrator is the elastic.Migrator of a KVServer whose C++ side set a migration
// handle (KVServer::set_migration_handle, or KVServerDefaultHandle's own):
// Export and Import call back into C++. C holds no Go pointer: it gets the
// server's C++ context back, and hands state over in malloc'd memory.
type cMigrator struct{ a *app }

var _ elastic.Migrator = cMigrator{}

// errServerDeleted is returned for a hand-over asked of a deleted KVServer.
var errServerDeleted = errors.New("the C++ KVServer was deleted; its keys cannot be handed over")

func (m cMigrator) Export(begin, end uint64) ([]byte, error) {
	a := m.a
	a.migMu.RLock()
	defer a.migMu.RUnlock()
	if a.migClosed {
		return nil, errServerDeleted
	}
	var state unsafe.Pointer
	var n C.size_t
	if e := C.psb_on_kv_export(a.srvCtx, C.uint64_t(begin), C.uint64_t(end), &state, &n); e != nil {
		defer C.free(unsafe.Pointer(e))
		return nil, fmt.Errorf("KVServer export handle: %s", C.GoString(e))
	}
	if state == nil {
		return nil, nil
	}
	defer C.free(state)
	return slices.Clone(unsafe.Slice((*byte)(state), int(n))), nil
}

func (m cMigrator) Import(state []byte) error {
	a := m.a
	a.migMu.RLock()
	defer a.migMu.RUnlock()
	if a.migClosed {
		return errServerDeleted
	}
	// state is Go memory without Go pointers, read during the call only.
	if e := C.psb_on_kv_import(a.srvCtx, bytesPtr(state), C.size_t(len(state))); e != nil {
		defer C.free(unsafe.Pointer(e))
		return fmt.Errorf("KVServer import handle: %s", C.GoString(e))
	}
	return nil
}

// setMigration makes the server hand its state over through C++ (enable)
// or through the generic hand-over. Outside elastic mode nothing moves, so
// there is nothing to set.
func (a *app) setMigration(enable bool) error {
	if a.kind != kindServer {
		return fmt.Errorf("elasticps: set_migration_handle on a %s; only a KVServer has one", a.kind)
	}
	if enable {
		a.hook.Store(hookSet)
	} else {
		a.hook.Store(hookNone)
	}
	if a.elastic == nil {
		return nil
	}
	var m elastic.Migrator
	if enable {
		m = cMigrator{a: a}
	}
	return a.elastic.SetMigrator(m)
}

// What a KVServer's C++ side told setMigration: nothing yet (no request
// handler set), a handler without a state hook, or a hook (its own or
// KVServerDefaultHandle's).
const (
	hookUnset int32 = iota
	hookNone
	hookSet
)

// checkStateHook runs on the server's requests until one finds the request
// handler set (C++ calls setMigration from set_request_handle): in an
// elastic job, a handler without a state hook is logged once, as its key
// ranges are not replicated and move with their values only. Programs set
// both handles before Start, so the first request sees the final choice.
func (a *app) checkStateHook() {
	h := a.hook.Load()
	if h == hookUnset || a.hookChecked.Swap(true) {
		return
	}
	if h == hookNone && a.elastic != nil && a.elastic.Enabled() {
		a.po.Logger().Warn(stateHookWarning(a.po.Config().Replicas))
	}
}

// stateHookWarning is the line logged for a KVServer without a state hook
// in an elastic job with replicas backups per key interval.
func stateHookWarning(replicas int) string {
	const add = "add a state hook with KVServer::set_migration_handle (see include/ps/kv_app.h) or serve with KVServerDefaultHandle"
	if replicas > 0 {
		return fmt.Sprintf("KVServer: the request handler has no state hook, so its key ranges are not replicated (PS_REPLICAS=%d: their values are lost if this server dies) and a move carries their values only; %s", replicas, add)
	}
	return "KVServer: the request handler has no state hook, so a move of its key ranges carries their values only and cannot bring keys back to a server that held them; " + add
}

// closeMigration waits for a running hand-over and refuses later ones: the
// C++ server is going away.
func (a *app) closeMigration() {
	a.migMu.Lock()
	a.migClosed = true
	a.migMu.Unlock()
}
