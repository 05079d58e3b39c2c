package injector

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Media types the server needs to know to label manifests.
const (
	mediaTypeOCIManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaTypeOCIIndex    = "application/vnd.oci.image.index.v1+json"
	annotationRefName    = "org.opencontainers.image.ref.name"
	maxManifestSize      = 4 << 20
)

// descriptor is the part of an OCI descriptor the server uses.
type descriptor struct {
	MediaType string
	Digest    string
}

// layout is a read-only view of an OCI image layout directory.
type layout struct {
	dir   string
	tags  map[string]descriptor // tag → manifest
	types map[string]string     // digest → media type, from index.json
}

func openLayout(dir string) (*layout, error) {
	b, err := os.ReadFile(filepath.Join(dir, "oci-layout"))
	if err != nil {
		return nil, errors.New("layout " + dir + ": " + err.Error())
	}
	if v, err := decodeJSON(b); err != nil || jsonStr(jsonObject(v)["imageLayoutVersion"]) == "" {
		return nil, errors.New("layout " + dir + ": oci-layout is not an OCI layout marker")
	}
	b, err = os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		return nil, errors.New("layout " + dir + ": " + err.Error())
	}
	idx, err := decodeJSON(b)
	if err != nil || jsonObject(idx) == nil {
		if err == nil {
			err = errors.New("not a JSON object")
		}
		return nil, errors.New("layout " + dir + ": index.json: " + err.Error())
	}
	l := &layout{dir: dir, tags: map[string]descriptor{}, types: map[string]string{}}
	for _, m := range jsonArray(jsonObject(idx)["manifests"]) {
		d := descriptor{MediaType: jsonStr(jsonObject(m)["mediaType"]), Digest: jsonStr(jsonObject(m)["digest"])}
		if !validDigest(d.Digest) {
			return nil, errors.New("layout " + dir + ": index.json: invalid digest " + strconv.Quote(d.Digest))
		}
		l.types[d.Digest] = d.MediaType
		ref := jsonStr(jsonObject(jsonObject(m)["annotations"])[annotationRefName])
		if ref == "" {
			continue
		}
		// A ref.name is a tag ("1.0.0") or, as some tools write it, a
		// full reference ("registry:1.0.0"); its tag serves either way.
		tag := ref
		if i := strings.LastIndexAny(ref, ":/@"); i >= 0 && ref[i] == ':' {
			tag = ref[i+1:]
		}
		if validTag(tag) {
			l.tags[tag] = d
		}
	}
	return l, nil
}

// sortedTags returns the layout's tags in lexical order.
func (l *layout) sortedTags() []string {
	tags := make([]string, 0, len(l.tags))
	for t := range l.tags {
		tags = append(tags, t)
	}
	slices.Sort(tags)
	return tags
}

// blobPath is the file of a validated digest.
func (l *layout) blobPath(dgst string) string {
	alg, hex, _ := strings.Cut(dgst, ":")
	return filepath.Join(l.dir, "blobs", alg, hex)
}

// openBlob opens a blob by validated digest; os.ErrNotExist if absent.
func (l *layout) openBlob(dgst string) (*os.File, int64, error) {
	f, err := os.Open(l.blobPath(dgst))
	if err != nil {
		return nil, 0, err
	}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, 0, os.ErrNotExist
	}
	return f, fi.Size(), nil
}

// manifest reads a manifest by tag or digest and returns its bytes, digest
// and media type.
func (l *layout) manifest(ref string) ([]byte, string, string, error) {
	dgst := ref
	if !strings.Contains(ref, ":") {
		d, ok := l.tags[ref]
		if !ok {
			return nil, "", "", os.ErrNotExist
		}
		dgst = d.Digest
	}
	f, size, err := l.openBlob(dgst)
	if err != nil {
		return nil, "", "", err
	}
	defer f.Close()
	if size > maxManifestSize {
		return nil, "", "", errors.New("manifest " + dgst + " is larger than 4 MiB")
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, "", "", err
	}
	v, err := decodeJSON(b)
	m := jsonObject(v)
	_, hasManifests := m["manifests"]
	_, hasConfig := m["config"]
	mt := jsonStr(m["mediaType"])
	if err != nil || !hasManifests && !hasConfig && mt == "" {
		// Not a manifest: a plain blob asked for on the manifests endpoint.
		return nil, "", "", os.ErrNotExist
	}
	if mt == "" {
		mt = l.types[dgst]
	}
	if mt == "" {
		mt = mediaTypeOCIManifest
		if hasManifests {
			mt = mediaTypeOCIIndex
		}
	}
	return b, dgst, mt, nil
}

// validDigest accepts sha256 (64) and sha512 (128) lowercase hex digests,
// which is also what keeps request paths inside blobs/.
func validDigest(d string) bool {
	alg, hex, ok := strings.Cut(d, ":")
	if !ok {
		return false
	}
	switch {
	case alg == "sha256" && len(hex) == 64, alg == "sha512" && len(hex) == 128:
	default:
		return false
	}
	for i := 0; i < len(hex); i++ {
		c := hex[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// validTag follows the distribution spec: [a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}.
func validTag(t string) bool {
	if t == "" || len(t) > 128 {
		return false
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		if !(alnum || c == '_' || i > 0 && (c == '.' || c == '-')) {
			return false
		}
	}
	return true
}

// validName follows the distribution spec's repository name grammar:
// path components of [a-z0-9]+ joined by ".", "_", "__" or "-"+, separated
// by "/".
func validName(n string) bool {
	if n == "" || len(n) > 255 {
		return false
	}
	for _, comp := range strings.Split(n, "/") {
		i := 0
		for {
			start := i
			for i < len(comp) && ('a' <= comp[i] && comp[i] <= 'z' || '0' <= comp[i] && comp[i] <= '9') {
				i++
			}
			if i == start {
				return false // empty component, or a separator at an edge
			}
			if i == len(comp) {
				break
			}
			start = i
			for i < len(comp) && (comp[i] == '.' || comp[i] == '_' || comp[i] == '-') {
				i++
			}
			switch sep := comp[start:i]; {
			case sep == ".", sep == "_", sep == "__", strings.Trim(sep, "-") == "":
			default:
				return false
			}
		}
	}
	return true
}
