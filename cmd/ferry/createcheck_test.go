package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/ferrypkg/ferry/internal/testsupport/thirdparty"
)

// dryRunDef is a definition with a real chart (gatekeeper's, findImages),
// an image in an OCI layout, and one mistake of each kind a dry run finds
// offline; everything it names elsewhere is on 127.0.0.1:1, where nothing
// answers, so a dry run that reached out would fail differently.
var dryRunDef = `apiVersion: ferry.dev/v1alpha1
kind: Package
metadata: {name: dry, version: 0.1.0}
platforms: [linux/` + runtime.GOARCH + `]
imagePolicies:
  - name: signed
    authorities:
      - key: missing.pub
components:
  - name: policy
    findImages: true
    charts:
      - path: gatekeeper
      - path: nochart
      - url: oci://127.0.0.1:1/charts/remote
        version: 1.0.0
  - name: app
    images:
      - {ref: docker.io/library/app:1.0, layout: images}
      - {ref: docker.io/library/app:2.0, layout: images}
      - 127.0.0.1:1/x:1
    manifests:
      - name: m
        files: [m.yaml, absent.yaml]
    files:
      - {source: f.txt, target: /f.txt}
      - {source: gone.txt, target: /gone.txt}
      - {source: folder, target: /folder}
    repositories:
      - url: https://127.0.0.1:1/r.git
      - {url: https://127.0.0.1:1/local.git, path: notrepo}
  - name: signed
    verify: signed
    images:
      - 127.0.0.1:1/y:1
`

// TestCreateDryRun: --dry-run names every problem create would meet
// offline, one line each, says what it read and what needs the network,
// exits 1, and leaves nothing behind: no package, no temporary.
func TestCreateDryRun(t *testing.T) {
	dir := t.TempDir()
	thirdparty.ByName(t, "gatekeeper").Copy(t, dir)
	writeFile(t, filepath.Join(dir, "ferry.yaml"), dryRunDef)
	writeLayoutImage(t, filepath.Join(dir, "images"), "1.0")
	writeFile(t, filepath.Join(dir, "m.yaml"), "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: dry\n")
	writeFile(t, filepath.Join(dir, "f.txt"), "hello\n")
	mustDo(t, os.Mkdir(filepath.Join(dir, "folder"), 0o755))
	mustDo(t, os.Mkdir(filepath.Join(dir, "notrepo"), 0o755))
	tmp := t.TempDir()
	env := []string{"TMPDIR=" + tmp}
	before := listTree(t, dir)

	out, stderr, code := runFerryEnv(t, dir, env, "package", "create", "--dry-run")
	wantErr := `ferry: ferry.yaml:6: imagePolicies.signed: key missing.pub: missing.pub does not exist
ferry: ferry.yaml:14: components[0].charts[1]: chart nochart: nochart does not exist
ferry: ferry.yaml:20: components[1].images[1]: image "2.0" not found in OCI layout images
ferry: ferry.yaml:23: components[1].manifests[0]: absent.yaml does not exist
ferry: ferry.yaml:27: components[1].files[1]: gone.txt does not exist
ferry: ferry.yaml:28: components[1].files[2]: folder is a folder, not a file
ferry: ferry.yaml:31: components[1].repositories[1]: notrepo is not a git repository (it holds neither .git nor HEAD)
`
	wantOut := `checked ferry.yaml: 7 problems; read 1 image, 1 chart, 1 file
not checked (needs the network): 5 images, 1 chart, 1 git repository
found image docker.io/curlimages/curl:8.20.0 (component policy, findImages)
found image docker.io/openpolicyagent/gatekeeper-crds:v3.23.1 (component policy, findImages)
found image docker.io/openpolicyagent/gatekeeper:v3.23.1 (component policy, findImages)
`
	if code != 1 || stderr != wantErr || out != wantOut {
		t.Errorf("create --dry-run: exit %d\nstderr:\n%s\nwant:\n%s\nstdout:\n%s\nwant:\n%s", code, stderr, wantErr, out, wantOut)
	}

	out, _, code = runFerryEnv(t, dir, env, "package", "create", "--dry-run", "-o", "json")
	var res struct {
		Problems []struct {
			File, Field, Message string
			Line                 int
		}
		Checked, NotChecked map[string]int
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != 1 {
		t.Fatalf("-o json: exit %d, %v: %s", code, err, out)
	}
	if len(res.Problems) != 7 || res.Problems[2].Line != 20 || res.Problems[2].Field != "components[1].images[1]" || res.Checked["images"] != 1 || res.NotChecked["images"] != 5 {
		t.Errorf("-o json: %+v", res)
	}

	if after := listTree(t, dir); !slices.Equal(before, after) {
		t.Errorf("a dry run changed the definition's folder:\n%v\nthen\n%v", before, after)
	}
	if left, _ := os.ReadDir(tmp); len(left) > 0 {
		t.Errorf("a dry run left %s in TMPDIR", left[0].Name())
	}

	// Fixed, it passes, and says so.
	fixed := strings.NewReplacer("      - key: missing.pub\n", "      - key: cosign.pub\n", "      - path: nochart\n", "",
		"      - {ref: docker.io/library/app:2.0, layout: images}\n", "", "absent.yaml", "m.yaml",
		"      - {source: gone.txt, target: /gone.txt}\n", "", "      - {source: folder, target: /folder}\n", "",
		"      - {url: https://127.0.0.1:1/local.git, path: notrepo}\n", "").Replace(dryRunDef)
	writeFile(t, filepath.Join(dir, "ferry.yaml"), fixed)
	if _, stderr, code := runFerryEnv(t, dir, []string{"COSIGN_PASSWORD=pw"}, "key", "generate", dir); code != 0 {
		t.Fatal(stderr)
	}
	out, stderr, code = runFerryEnv(t, dir, env, "package", "create", "--dry-run")
	if code != 0 || stderr != "" || !strings.HasPrefix(out, "checked ferry.yaml: no problems; read 1 image, 1 chart, 1 manifest entry, 1 file, 1 image policy\n") {
		t.Errorf("dry run of the fixed definition: exit %d\n%s%s", code, out, stderr)
	}
}

// TestCreateDryRunDefinitionMistakes: the definition's own mistakes are
// all named at once, in the file's order; its files are not looked at
// until it has none.
func TestCreateDryRunDefinitionMistakes(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "ferry.yaml"), "apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata:\n  name: Bad\n  version: 1.0.0\ncomponents:\n  - name: c\n    colour: red\n    files:\n      - {source: gone.txt}\n  - name: c\n")
	out, stderr, code := runFerry(t, dir, "package", "create", "--dry-run")
	wantErr := `ferry: ferry.yaml:4: metadata.name: "Bad" is not a valid name (lowercase letters, digits, '-' and '.')
ferry: ferry.yaml:8: components[0].colour: unknown field
ferry: ferry.yaml:10: components[0].files[0].target: missing
ferry: ferry.yaml:11: components[1].name: duplicate component name "c" (also components[0])
`
	wantOut := "checked ferry.yaml: 4 problems in the definition; its images, charts and files are checked once it has none\n"
	if code != 1 || stderr != wantErr || out != wantOut {
		t.Errorf("exit %d\nstderr:\n%s\nwant:\n%s\nstdout:\n%s\nwant:\n%s", code, stderr, wantErr, out, wantOut)
	}
}

// listTree lists the files under dir with their sizes.
func listTree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	mustDo(t, filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		out = append(out, p+" "+fi.Mode().String()+" "+string(rune('0'+fi.Size()%10)))
		return nil
	}))
	return out
}
