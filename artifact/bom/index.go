package bom

import (
	"encoding/binary"
	"slices"

	"github.com/opencontainers/go-digest"
	"github.com/package-url/packageurl-go"
)

// MediaTypeIndex is the media type of an index written by WriteTo.
const MediaTypeIndex = "application/vnd.ferry.sbom.index.v1"

// Index holds the components of many SBOMs, each SBOM keyed by its
// document's digest. A component many SBOMs list is held once (its
// strings too), and lookups by package URL (type, namespace, name) and by
// name go straight to the components of that name, so that a query does
// not read every SBOM; a query with "*" looks through the distinct
// components. An index is a cache of what SBOMs say: it can always be
// made again from them. Its zero value is not usable: NewIndex makes one.
// An Index is not safe for concurrent use while it is written to.
type Index struct {
	// strs numbers the distinct strings of the components; purlOf[n]
	// is the first component whose package URL is string n (-1: none),
	// whose info a component of the same URL shares.
	strs    map[string]uint32
	strList []string
	purlOf  []int32
	comps   []Component
	infos   []info
	compID  map[string]uint32 // component identity → index in comps
	users   [][]uint32        // component → SBOMs listing it, ascending
	byKey   map[string][]uint32
	byName  map[string][]uint32

	docs     []indexDoc
	byDigest map[digest.Digest]uint32
}

// indexDoc is one SBOM: its digest and its components, ascending.
type indexDoc struct {
	digest digest.Digest
	comps  []uint32
}

// NewIndex returns an empty index.
func NewIndex() *Index {
	return &Index{
		strs:     map[string]uint32{},
		compID:   map[string]uint32{},
		byKey:    map[string][]uint32{},
		byName:   map[string][]uint32{},
		byDigest: map[digest.Digest]uint32{},
	}
}

// Len is the number of SBOMs the index holds.
func (x *Index) Len() int { return len(x.docs) }

// Has reports whether the index holds the SBOM whose digest is d.
func (x *Index) Has(d digest.Digest) bool {
	_, ok := x.byDigest[d]
	return ok
}

// Add records the components of the SBOM whose document's digest is d. An
// SBOM the index holds already is left as it is: a digest names one
// document, so its components cannot differ.
func (x *Index) Add(d digest.Digest, cs []Component) {
	if x.Has(d) {
		return
	}
	ids := make([]uint32, 0, len(cs))
	for _, c := range cs {
		ids = append(ids, x.component(c))
	}
	slices.Sort(ids)
	x.addDoc(d, slices.Compact(ids))
}

// addDoc appends an SBOM whose components are ids, ascending and distinct.
func (x *Index) addDoc(d digest.Digest, ids []uint32) {
	doc := uint32(len(x.docs))
	x.docs = append(x.docs, indexDoc{digest: d, comps: ids})
	x.byDigest[d] = doc
	for _, id := range ids {
		x.users[id] = append(x.users[id], doc)
	}
}

// component returns the index of c in comps, adding it if it is new. Its
// identity is the numbers of its strings, interned first: a component
// costs its strings once however many components share them, and its
// package URL is read once however many components carry it.
func (x *Index) component(c Component) uint32 {
	var ids [4]uint32
	for i, f := range [...]*string{&c.Name, &c.Version, &c.Type, &c.PURL} {
		ids[i] = x.intern(f)
	}
	var ls []uint32
	for _, l := range c.Licenses {
		ls = append(ls, x.intern(&l))
	}
	return x.componentOf(ids, ls)
}

// componentOf is component for a component given by the numbers of its
// strings (name, version, type, package URL) and of its licenses.
func (x *Index) componentOf(ids [4]uint32, licenses []uint32) uint32 {
	var buf [64]byte
	key := buf[:0]
	for _, n := range ids {
		key = binary.AppendUvarint(key, uint64(n))
	}
	for _, n := range licenses {
		key = binary.AppendUvarint(key, uint64(n))
	}
	if id, ok := x.compID[string(key)]; ok {
		return id
	}
	c := Component{Name: x.strList[ids[0]], Version: x.strList[ids[1]], Type: x.strList[ids[2]], PURL: x.strList[ids[3]]}
	if len(licenses) > 0 {
		c.Licenses = make([]string, len(licenses))
		for i, n := range licenses {
			c.Licenses[i] = x.strList[n]
		}
	}
	id := uint32(len(x.comps))
	x.compID[string(key)] = id
	x.comps = append(x.comps, c)
	x.users = append(x.users, nil)
	var in info
	switch first := x.purlOf[ids[3]]; {
	case c.PURL == "":
		in = info{typ: c.Type}
	case first >= 0:
		in = x.infos[first]
		if !in.purl {
			in.typ = c.Type
		}
	default:
		x.purlOf[ids[3]] = int32(id)
		in = infoOf(c)
	}
	x.infos = append(x.infos, in)
	if in.purl {
		k := in.key()
		x.byKey[k] = append(x.byKey[k], id)
	}
	x.byName[c.Name] = append(x.byName[c.Name], id)
	if in.typ == packageurl.TypePyPi && in.name != c.Name {
		x.byName[in.name] = append(x.byName[in.name], id)
	}
	return id
}

// intern makes *s the index's copy of its string and returns its number.
func (x *Index) intern(s *string) uint32 {
	if n, ok := x.strs[*s]; ok {
		*s = x.strList[n]
		return n
	}
	n := uint32(len(x.strList))
	x.strs[*s] = n
	x.strList = append(x.strList, *s)
	x.purlOf = append(x.purlOf, -1)
	return n
}

// Retain keeps the SBOMs for which keep returns true, drops the others
// (and the components only they listed), and returns how many it dropped.
func (x *Index) Retain(keep func(digest.Digest) bool) int {
	var kept []indexDoc
	for _, d := range x.docs {
		if keep(d.digest) {
			kept = append(kept, d)
		}
	}
	dropped := len(x.docs) - len(kept)
	if dropped == 0 {
		return 0
	}
	n := NewIndex()
	for _, d := range kept {
		ids := make([]uint32, len(d.comps))
		for i, id := range d.comps {
			ids[i] = n.component(x.comps[id])
		}
		slices.Sort(ids)
		n.addDoc(d.digest, ids)
	}
	*x = *n
	return dropped
}

// Components returns the components of the SBOM whose digest is d (nil if
// the index does not hold it), in the order the index first saw each.
// Their Licenses are shared with the index: do not modify them.
func (x *Index) Components(d digest.Digest) []Component {
	doc, ok := x.byDigest[d]
	if !ok {
		return nil
	}
	return x.components(x.docs[doc].comps)
}

func (x *Index) components(ids []uint32) []Component {
	cs := make([]Component, len(ids))
	for i, id := range ids {
		cs[i] = x.comps[id]
	}
	return cs
}

// Each calls fn with each SBOM's digest and components, in the order they
// were added, until fn returns false.
func (x *Index) Each(fn func(sbom digest.Digest, cs []Component) bool) {
	for _, d := range x.docs {
		if !fn(d.digest, x.components(d.comps)) {
			return
		}
	}
}

// Query calls fn with each SBOM and component of it that q matches,
// component by component (in the order the index first saw each), until
// fn returns false.
func (x *Index) Query(q Query, fn func(sbom digest.Digest, c Component) bool) {
	for _, id := range x.candidates(q) {
		if !q.match(x.comps[id], x.infos[id]) {
			continue
		}
		for _, doc := range x.users[id] {
			if !fn(x.docs[doc].digest, x.comps[id]) {
				return
			}
		}
	}
}

// candidates are the components q may match, ascending: those of its
// package URL or name, or all of them for a query with "*".
func (x *Index) candidates(q Query) []uint32 {
	switch {
	case q.src == "":
		return nil
	case q.wild:
		all := make([]uint32, len(x.comps))
		for i := range all {
			all[i] = uint32(i)
		}
		return all
	case q.purl:
		return x.byKey[q.typ+"/"+q.ns+"/"+q.name]
	}
	ids := x.byName[q.name]
	if more := x.byName[PEP503(q.name)]; len(more) > 0 && PEP503(q.name) != q.name {
		ids = slices.Concat(ids, more)
		slices.Sort(ids)
		ids = slices.Compact(ids)
	}
	return ids
}
