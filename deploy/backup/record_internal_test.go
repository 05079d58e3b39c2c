package backup

import (
	"errors"
	"strings"
	"testing"
)

// TestParseRecordRefusesDuplicates: a record that lists a blob, a
// repository, a Package or a key twice (two sizes, a manifest and a layer,
// two sets of tags, two specs), or a blob's repository twice, is refused
// in one line naming it; a backup ferry wrote lists each once.
func TestParseRecordRefusesDuplicates(t *testing.T) {
	const d = "sha256:" + "ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12"
	const head = `{"mediaType":"` + MediaTypeRecord + `",`
	for _, tc := range []struct {
		name, record, want string
	}{
		{"one of each", head + `"repositories":[{"name":"a"}],"blobs":[{"digest":"` + d + `","size":1,"repos":[0]}]}`, ""},
		{"a blob as a manifest and a layer", head + `"repositories":[{"name":"a"}],"blobs":[{"digest":"` + d + `","size":1,"mediaType":"application/vnd.oci.image.manifest.v1+json","repos":[0]},{"digest":"` + d + `","size":1,"repos":[0]}]}`, "blob " + d + " twice"},
		{"a blob of two sizes", head + `"repositories":[{"name":"a"}],"blobs":[{"digest":"` + d + `","size":1,"repos":[0]},{"digest":"` + d + `","size":2,"repos":[0]}]}`, "blob " + d + " twice"},
		{"a repository twice", head + `"repositories":[{"name":"a","tags":{"v1":"` + d + `"}},{"name":"a"}],"blobs":[]}`, "repository a twice"},
		// A blob naming its repository again and again: each is one more
		// request of the restore (a 64 MiB record: 33 million).
		{"a blob naming a repository twice", head + `"repositories":[{"name":"a"},{"name":"b"}],"blobs":[{"digest":"` + d + `","size":1,"repos":[0,1,0]}]}`, "blob " + d + " names repository a twice"},
		{"a Package twice", head + `"repositories":[],"blobs":[],"packages":[{"name":"p","namespace":"n","spec":{}},{"name":"p","namespace":"n","spec":{"ref":"x"}}]}`, "Package n/p twice"},
		{"a Package in two namespaces", head + `"repositories":[],"blobs":[],"packages":[{"name":"p","namespace":"n","spec":{}},{"name":"p","namespace":"m","spec":{}}]}`, ""},
		{"a key twice", head + `"repositories":[],"blobs":[],"keys":[{"kind":"Secret","name":"k","namespace":"n","data":{"a":"1"}},{"kind":"Secret","name":"k","namespace":"n","data":{"a":"2"}}]}`, "key Secret n/k twice"},
		{"a Secret and a ConfigMap of one name", head + `"repositories":[],"blobs":[],"keys":[{"kind":"Secret","name":"k","namespace":"n","data":{}},{"kind":"ConfigMap","name":"k","namespace":"n","data":{}}]}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec, err := parseRecord([]byte(tc.record))
			if tc.want == "" {
				if err != nil || rec == nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrNotBackup) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("got %v, want an error naming %q", err, tc.want)
			}
		})
	}
}

// TestParseRecordNamesLongValuesInShort: a record's strings are as long as
// its 64 MiB allow; a refusal names the one it refuses in short.
func TestParseRecordNamesLongValuesInShort(t *testing.T) {
	long := strings.Repeat("x", 1<<20)
	const head = `{"mediaType":"` + MediaTypeRecord + `",`
	for _, tc := range []struct{ name, record string }{
		{"media type", `{"mediaType":"` + long + `"}`},
		{"repository", head + `"repositories":[{"name":"` + long + `"}],"blobs":[]}`},
		{"blob", head + `"repositories":[],"blobs":[{"digest":"sha256:` + long + `","size":1}]}`},
		{"Package", head + `"repositories":[],"blobs":[],"packages":[{"name":"` + long + `","namespace":"` + long + `","spec":{}}]}`},
		{"key", head + `"repositories":[],"blobs":[],"keys":[{"kind":"` + long + `","name":"` + long + `","namespace":"` + long + `","data":{}}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseRecord([]byte(tc.record))
			if !errors.Is(err, ErrNotBackup) || len(err.Error()) > 512 {
				t.Fatalf("got %d bytes: %.300v…, want a refusal of at most 512 bytes", len(err.Error()), err)
			}
			t.Log(err)
		})
	}
}
