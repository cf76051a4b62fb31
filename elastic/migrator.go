package elastic

// Migrator is implemented by server handlers that can hand the state of a
// key range to another server (kv.DefaultHandler does). Export returns an
// opaque snapshot of every key in [begin, end) and stops serving them;
// Import installs such a snapshot. Handlers without it fall back to
// capturing values through their own pull path and installing them as
// initializing pushes (see Server's doc).
//
// Export and Import run on their own goroutine, concurrently with the
// handler serving other keys. Both must be all or nothing: an Export that
// fails keeps every key (the move is aborted and the keys stay), an Import
// that fails installs none (the snapshot goes back to the old owner, which
// imports it again). Export and Import may each run several times for the
// same keys (a range may move away and come back).
//
// A Migrator that also has Snapshot(begin, end uint64) ([]byte, error),
// returning what Export would but keeping the keys (kv.DefaultHandler and
// paramstore.Store do), is copied with it for backups (PS_REPLICAS)
// instead of by an Export imported back at once; one with
// AppendSnapshot(dst []byte, begin, end uint64) ([]byte, error), which
// appends that copy to dst, has it written straight into the message
// carrying it. On a backup, a Migrator with Replace(begin, end uint64,
// state []byte) error, which makes [begin, end) hold exactly the copy's
// keys (all or nothing, reusing its buffers), installs copies with it
// instead of an Export of the old copy and an Import of the new one.
type Migrator interface {
	Export(begin, end uint64) ([]byte, error)
	Import(state []byte) error
}
