package gitcred

import (
	"os"
	"path/filepath"
	"testing"
)

func TestNetrc(t *testing.T) {
	f := filepath.Join(t.TempDir(), "netrc")
	data := `# comment
machine git.example.com login alice password a1
machine 127.0.0.1:8080
  login bob
  password b2
macdef init
  cd /pub

default login anon password x
`
	if err := os.WriteFile(f, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("NETRC", f)
	for host, want := range map[string]Credential{
		"git.example.com":      {"alice", "a1"},
		"git.example.com:8443": {"alice", "a1"},
		"127.0.0.1:8080":       {"bob", "b2"},
		"other.example":        {"anon", "x"},
	} {
		c, ok, err := Netrc(host)
		if err != nil || !ok || c != want {
			t.Errorf("Netrc(%q) = %+v, %v, %v; want %+v", host, c, ok, err, want)
		}
	}
	if err := os.WriteFile(f, []byte("machine h login\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Netrc("h"); err == nil {
		t.Error("a malformed netrc: no error")
	}
	t.Setenv("NETRC", filepath.Join(t.TempDir(), "missing"))
	if _, ok, err := Netrc("h"); ok || err != nil {
		t.Errorf("a missing netrc: %v, %v", ok, err)
	}
}
