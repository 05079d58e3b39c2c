package mkimg

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path"
	"strings"
)

// HostFiles reads programs of this machine and the shared libraries they
// load, the dynamic loader included, as ldd lists them, for
// Options.Executables: each under the path it has here (a symbolic link
// is followed, and its target's bytes stored under the link's path, the
// name the loader looks for). A static program or a script is read alone.
// paths must be absolute.
func HostFiles(paths ...string) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, p := range paths {
		if !path.IsAbs(p) {
			return nil, fmt.Errorf("mkimg: host file %q: want an absolute path", p)
		}
		if err := readHost(out, p); err != nil {
			return nil, err
		}
		libs, err := sharedLibraries(p)
		if err != nil {
			return nil, err
		}
		for _, lib := range libs {
			if err := readHost(out, lib); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

func readHost(into map[string][]byte, p string) error {
	if _, ok := into[p]; ok {
		return nil
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return fmt.Errorf("mkimg: host file: %w", err)
	}
	into[p] = b
	return nil
}

// sharedLibraries lists the absolute paths ldd prints for program: "lib
// => /path (0x…)" and the loader's "/path (0x…)"; none for a program ldd
// calls not dynamic.
func sharedLibraries(program string) ([]string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command("ldd", program)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if strings.Contains(stdout.String()+stderr.String(), "not a dynamic executable") {
			return nil, nil
		}
		return nil, fmt.Errorf("mkimg: ldd %s: %v: %s", program, err, strings.TrimSpace(stderr.String()))
	}
	var libs []string
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if _, after, ok := strings.Cut(line, "=> "); ok {
			line = after
		}
		f := strings.Fields(line)
		if len(f) == 0 || !path.IsAbs(f[0]) {
			continue // linux-vdso.so.1, or "not found"
		}
		libs = append(libs, f[0])
	}
	if strings.Contains(stdout.String(), "not found") {
		return nil, fmt.Errorf("mkimg: ldd %s: a library is not found: %s", program, strings.TrimSpace(stdout.String()))
	}
	return libs, nil
}
