package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// runFerryEnv runs the binary in its own session (no controlling terminal,
// as in CI) with extra environment; it returns stdout, stderr, exit code.
func runFerryEnv(t *testing.T, dir string, env []string, args ...string) (string, string, int) {
	t.Helper()
	return runFerryIn(t, dir, env, "", args...)
}

// runFerryIn is runFerryEnv with stdin.
func runFerryIn(t *testing.T, dir string, env []string, stdin string, args ...string) (string, string, int) {
	t.Helper()
	return runBinary(t, ferryBin, dir, env, stdin, args...)
}

// runBinary runs bin in dir with env added (and no registry password from
// this process's environment), and returns stdout, stderr and the exit code.
func runBinary(t *testing.T, bin, dir string, env []string, stdin string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = append(withoutPassword(os.Environ()), env...)
	cmd.Stdin = strings.NewReader(stdin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

func withoutPassword(env []string) []string {
	var out []string
	for _, e := range env {
		if !strings.HasPrefix(e, passwordEnv+"=") {
			out = append(out, e)
		}
	}
	return out
}

// TestCLISignVerify: key generate, create --sign-key, sign, verify and
// inspect --key, with their exit codes, one-line errors and JSON.
func TestCLISignVerify(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "ferry.yaml"), goodDef)
	writeFile(t, filepath.Join(dir, "m.yaml"), "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: cli\n")
	writeFile(t, filepath.Join(dir, "f.txt"), "hello\n")
	pw := []string{passwordEnv + "=secret"}
	ok := func(env []string, args ...string) string {
		t.Helper()
		out, stderr, code := runFerryEnv(t, dir, env, args...)
		if code != 0 {
			t.Fatalf("ferry %s: exit %d: %s", strings.Join(args, " "), code, stderr)
		}
		return out
	}
	fails := func(env []string, want string, args ...string) {
		t.Helper()
		out, stderr, code := runFerryEnv(t, dir, env, args...)
		if code != 1 || !strings.HasPrefix(stderr, "ferry: ") || !strings.Contains(stderr, want) || strings.Count(stderr, "\n") != 1 || out != "" {
			t.Fatalf("ferry %s: exit %d, stdout %q, stderr %q; want exit 1 and one line containing %q", strings.Join(args, " "), code, out, stderr, want)
		}
	}

	ok(pw, "key", "generate")
	ok([]string{passwordEnv + "=other"}, "key", "generate", "--prefix", "other")
	if fi, err := os.Stat(filepath.Join(dir, "cosign.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("cosign.key: %v %v", fi, err)
	}
	fails(pw, "cosign.key exists", "key", "generate")
	fails(nil, "set COSIGN_PASSWORD", "key", "generate", "--prefix", "nopw")

	ok(nil, "package", "create", "-f", "unsigned.tar")
	fails(nil, "no signature over the package root", "package", "verify", "unsigned.tar", "--key", "cosign.pub")
	fails(nil, "no signature over the package root", "package", "inspect", "unsigned.tar", "--key", "cosign.pub")
	fails(nil, "--key is required", "package", "verify", "unsigned.tar")
	fails([]string{passwordEnv + "=wrong"}, "wrong password for cosign.key", "package", "sign", "unsigned.tar", "--key", "cosign.key")
	fails(nil, "set COSIGN_PASSWORD", "package", "sign", "unsigned.tar", "--key", "cosign.key")
	fails(pw, "cosign.pub is a public key", "package", "sign", "unsigned.tar", "--key", "cosign.pub")
	fails(nil, "cosign.key is a private key", "package", "verify", "unsigned.tar", "--key", "cosign.key")

	ok(pw, "package", "create", "-f", "signed.tar.zst", "--sign-key", "cosign.key")
	out := ok(nil, "package", "verify", "signed.tar.zst", "--key", "cosign.pub", "-o", "json")
	var res struct {
		Package struct {
			Name   string `json:"name"`
			Root   string `json:"root"`
			Signed bool   `json:"signed"`
		} `json:"package"`
		Signatures []struct{ Key string } `json:"signatures"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Package.Name != "cli" || !res.Package.Signed || len(res.Signatures) != 1 || res.Signatures[0].Key != "cosign.pub" {
		t.Fatalf("verify -o json: %v %s", err, out)
	}
	fails(nil, "signed by another key", "package", "verify", "signed.tar.zst", "--key", "other.pub")
	if out := ok(nil, "package", "inspect", "signed.tar.zst", "--key", "cosign.pub"); !strings.Contains(out, "Signed") || !strings.Contains(out, res.Package.Root) {
		t.Fatalf("inspect --key: %s", out)
	}

	ok(pw, "package", "sign", "unsigned.tar", "--key", "cosign.key")
	ok([]string{passwordEnv + "=other"}, "package", "sign", "unsigned.tar", "--key", "other.key")
	for _, k := range []string{"cosign.pub", "other.pub"} {
		ok(nil, "package", "verify", "unsigned.tar", "--key", k)
	}
	if out := ok(pw, "package", "sign", "unsigned.tar", "--key", "cosign.key"); !strings.Contains(out, "nothing changed") {
		t.Fatalf("re-sign: %s", out)
	}
}
