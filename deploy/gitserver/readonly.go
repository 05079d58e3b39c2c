package gitserver

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"

	"github.com/go-git/go-git/v6/config"
	"github.com/go-git/go-git/v6/plumbing"
	gitindex "github.com/go-git/go-git/v6/plumbing/format/index"
	"github.com/go-git/go-git/v6/plumbing/storer"
	"github.com/go-git/go-git/v6/storage"
)

// errReadOnly is what every write to a served repository returns.
var errReadOnly = errors.New("gitserver: carried repositories are read-only")

// served is an indexed repository as upload-pack sees it. Every write
// fails, and it has no Close (the backend closes what it loads, and the
// index keeps it for the next request).
//
// Its objects are lazy: the object table gives their type and size, and
// their content is read from the pack only when it is read. go-git's pack
// encoder asks for every object it sends before it writes the first one;
// objects read whole there would hold the history in memory.
//
// Its configuration sets pack.window to 1: deltas stored in the pack are
// sent as they are, new ones are never computed (go-git computes them in
// memory, both objects whole, whatever their size).
type served struct {
	storage.Storer
	objs *objectTable
}

var (
	_ storage.Storer           = served{}
	_ storer.DeltaObjectStorer = served{}
)

// EncodedObject returns a lazy object, or ErrObjectNotFound.
func (s served) EncodedObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	rec, ok := s.objs.find(h)
	if !ok || (t != plumbing.AnyObject && t != rec.typ) {
		return nil, plumbing.ErrObjectNotFound
	}
	return &lazyObject{st: s.Storer, h: h, t: rec.typ, size: rec.size}, nil
}

// DeltaObject is EncodedObject, but a delta stored in the pack is
// returned as that delta, for the encoder to send as it is.
func (s served) DeltaObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	rec, ok := s.objs.find(h)
	if !ok || (t != plumbing.AnyObject && t != rec.typ) {
		return nil, plumbing.ErrObjectNotFound
	}
	if rec.base < 0 {
		return &lazyObject{st: s.Storer, h: h, t: rec.typ, size: rec.size}, nil
	}
	return &lazyDelta{
		lazyObject: lazyObject{st: s.Storer, h: h, t: rec.kind, size: rec.deltaSize},
		base:       s.objs.hashAt(rec.base), actualSize: rec.size,
	}, nil
}

// HasEncodedObject answers from the object table.
func (s served) HasEncodedObject(h plumbing.Hash) error {
	if _, ok := s.objs.find(h); !ok {
		return plumbing.ErrObjectNotFound
	}
	return nil
}

// EncodedObjectSize answers from the object table.
func (s served) EncodedObjectSize(h plumbing.Hash) (int64, error) {
	rec, ok := s.objs.find(h)
	if !ok {
		return 0, plumbing.ErrObjectNotFound
	}
	return rec.size, nil
}

// Config is the repository's, with pack.window 1 (see served).
func (s served) Config() (*config.Config, error) {
	cfg, err := s.Storer.Config()
	if err != nil {
		return nil, err
	}
	c := *cfg
	c.Pack.Window = 1
	return &c, nil
}

func (served) RawObjectWriter(plumbing.ObjectType, int64) (io.WriteCloser, error) {
	return nil, errReadOnly
}
func (served) SetEncodedObject(plumbing.EncodedObject) (plumbing.Hash, error) {
	return plumbing.ZeroHash, errReadOnly
}
func (served) AddAlternate(string) error                           { return errReadOnly }
func (served) SetReference(*plumbing.Reference) error              { return errReadOnly }
func (served) CheckAndSetReference(_, _ *plumbing.Reference) error { return errReadOnly }
func (served) RemoveReference(plumbing.ReferenceName) error        { return errReadOnly }
func (served) PackRefs() error                                     { return errReadOnly }
func (served) SetShallow([]plumbing.Hash) error                    { return errReadOnly }
func (served) SetIndex(*gitindex.Index) error                      { return errReadOnly }
func (served) SetConfig(*config.Config) error                      { return errReadOnly }
func (served) Module(string) (storage.Storer, error)               { return nil, errReadOnly }

// lazyObject is an object whose content is read when its Reader is.
type lazyObject struct {
	st   storage.Storer
	h    plumbing.Hash
	t    plumbing.ObjectType
	size int64
}

func (o *lazyObject) Hash() plumbing.Hash             { return o.h }
func (o *lazyObject) Type() plumbing.ObjectType       { return o.t }
func (o *lazyObject) SetType(plumbing.ObjectType)     {}
func (o *lazyObject) Size() int64                     { return o.size }
func (o *lazyObject) SetSize(int64)                   {}
func (o *lazyObject) Writer() (io.WriteCloser, error) { return nil, errReadOnly }

func (o *lazyObject) Reader() (io.ReadCloser, error) {
	obj, err := o.st.EncodedObject(plumbing.AnyObject, o.h)
	if err != nil {
		return nil, err
	}
	return obj.Reader()
}

// lazyDelta is a delta stored in the pack, read when its Reader is.
type lazyDelta struct {
	lazyObject
	base       plumbing.Hash
	actualSize int64
}

func (d *lazyDelta) BaseHash() plumbing.Hash   { return d.base }
func (d *lazyDelta) ActualHash() plumbing.Hash { return d.h }
func (d *lazyDelta) ActualSize() int64         { return d.actualSize }

func (d *lazyDelta) Reader() (io.ReadCloser, error) {
	ds, ok := d.st.(storer.DeltaObjectStorer)
	if !ok {
		return nil, errors.New("gitserver: storage without deltas")
	}
	obj, err := ds.DeltaObject(plumbing.AnyObject, d.h)
	if err != nil {
		return nil, err
	}
	if obj.Size() != d.size {
		return nil, fmt.Errorf("gitserver: delta %s: %d bytes, not the %d indexed", d.h, obj.Size(), d.size)
	}
	return obj.Reader()
}

var _ plumbing.DeltaObject = (*lazyDelta)(nil)

// The object table: one record per object of the pack, in hash order
// (the .idx's), written by the indexer.
const (
	objectTableName = "ferry-objects"
	tableHeader     = 16 // magic, count, reserved
	tableRecord     = 40 // hash, type, stored kind, pad, size, delta size, base
)

var tableMagic = [8]byte{'f', 'e', 'r', 'r', 'y', 'o', 'b', 1}

// objectTable is the object table, in memory (40 bytes an object).
type objectTable struct {
	b []byte // the records
	n int
}

// objectRecord is what the table says of one object.
type objectRecord struct {
	typ       plumbing.ObjectType // the object's
	kind      plumbing.ObjectType // as stored: its type, or OFS/REF delta
	size      int64               // the object's
	deltaSize int64               // a stored delta's instructions
	base      int32               // a stored delta's base (table position), else -1
}

func loadObjectTable(path string) (*objectTable, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(b) < tableHeader || !bytes.Equal(b[:len(tableMagic)], tableMagic[:]) {
		return nil, fmt.Errorf("%s: not an object table", path)
	}
	n := int(binary.BigEndian.Uint32(b[8:12]))
	if len(b) != tableHeader+n*tableRecord {
		return nil, fmt.Errorf("%s: %d bytes for %d objects", path, len(b), n)
	}
	return &objectTable{b: b[tableHeader:], n: n}, nil
}

func (t *objectTable) record(k int) []byte { return t.b[k*tableRecord : (k+1)*tableRecord] }

func (t *objectTable) find(h plumbing.Hash) (objectRecord, bool) {
	key := h.Bytes()
	if len(key) != 20 {
		return objectRecord{}, false
	}
	k := sort.Search(t.n, func(k int) bool { return bytes.Compare(t.record(k)[:20], key) >= 0 })
	if k == t.n {
		return objectRecord{}, false
	}
	r := t.record(k)
	if !bytes.Equal(r[:20], key) {
		return objectRecord{}, false
	}
	rec := objectRecord{
		typ: plumbing.ObjectType(r[20]), kind: plumbing.ObjectType(r[21]),
		size: int64(binary.BigEndian.Uint64(r[24:32])), deltaSize: int64(binary.BigEndian.Uint32(r[32:36])), base: -1,
	}
	if b := binary.BigEndian.Uint32(r[36:40]); b != math.MaxUint32 && int(b) < t.n {
		rec.base = int32(b)
	}
	return rec, true
}

func (t *objectTable) hashAt(k int32) plumbing.Hash {
	h, _ := plumbing.FromBytes(t.record(int(k))[:20])
	return h
}
