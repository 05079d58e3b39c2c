package gitserver

import (
	"errors"
	"io"

	"github.com/go-git/go-git/v6/config"
	"github.com/go-git/go-git/v6/plumbing"
	gitindex "github.com/go-git/go-git/v6/plumbing/format/index"
	"github.com/go-git/go-git/v6/plumbing/storer"
	"github.com/go-git/go-git/v6/storage"
)

// errReadOnly is what every write to a served repository returns.
var errReadOnly = errors.New("gitserver: carried repositories are read-only")

// readOnly is an indexed repository as the backend sees it: every write
// fails, and it has no Close (the backend closes what it loads, and the
// index keeps it for the next request).
type readOnly struct{ storage.Storer }

var (
	_ storage.Storer           = readOnly{}
	_ storer.DeltaObjectStorer = readOnly{}
)

// DeltaObject lets the pack encoder reuse the stored deltas of a
// filesystem repository.
func (r readOnly) DeltaObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	if d, ok := r.Storer.(storer.DeltaObjectStorer); ok {
		return d.DeltaObject(t, h)
	}
	return r.EncodedObject(t, h)
}

func (readOnly) RawObjectWriter(plumbing.ObjectType, int64) (io.WriteCloser, error) {
	return nil, errReadOnly
}
func (readOnly) SetEncodedObject(plumbing.EncodedObject) (plumbing.Hash, error) {
	return plumbing.ZeroHash, errReadOnly
}
func (readOnly) AddAlternate(string) error                           { return errReadOnly }
func (readOnly) SetReference(*plumbing.Reference) error              { return errReadOnly }
func (readOnly) CheckAndSetReference(_, _ *plumbing.Reference) error { return errReadOnly }
func (readOnly) RemoveReference(plumbing.ReferenceName) error        { return errReadOnly }
func (readOnly) PackRefs() error                                     { return errReadOnly }
func (readOnly) SetShallow([]plumbing.Hash) error                    { return errReadOnly }
func (readOnly) SetIndex(*gitindex.Index) error                      { return errReadOnly }
func (readOnly) SetConfig(*config.Config) error                      { return errReadOnly }
func (readOnly) Module(string) (storage.Storer, error)               { return nil, errReadOnly }
